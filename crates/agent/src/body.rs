//! Response bodies: JSON, typed errors, and NDJSON frame streams built from a retained
//! tail plus live events.

use crate::feed::Event;
use crate::ring::Chunk;
use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use http::{Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use sandboxd_agent_protocol::{AgentError, Frame, ProcessInfo};
use std::io;
use tokio::sync::broadcast::{self, error::RecvError};

/// The agent's response body type.
pub(crate) type Body = UnsyncBoxBody<Bytes, io::Error>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub(crate) fn from_stream(s: impl Stream<Item = io::Result<Bytes>> + Send + 'static) -> Body {
    StreamBody::new(s.map(|r| r.map(hyper::body::Frame::data))).boxed_unsync()
}

fn response(status: StatusCode, content_type: &str, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    resp
}

pub(crate) fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(bytes) => response(status, "application/json", full(bytes)),
        Err(e) => error(&crate::error::error(
            sandboxd_agent_protocol::AgentErrorCode::Io,
            format!("cannot encode response: {e}"),
        )),
    }
}

pub(crate) fn error(e: &AgentError) -> Response<Body> {
    let status =
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let bytes = serde_json::to_vec(e).unwrap_or_default();
    response(status, "application/json", full(bytes))
}

pub(crate) fn no_content() -> Response<Body> {
    response(StatusCode::NO_CONTENT, "text/plain", full(Bytes::new()))
}

fn line(frame: &Frame) -> io::Result<Bytes> {
    let mut v = serde_json::to_vec(frame).map_err(io::Error::other)?;
    v.push(b'\n');
    Ok(Bytes::from(v))
}

/// NDJSON: the tail's frames, then live events until an `Exit` (or the channel closes),
/// then `ended`'s `Exit` frame when the process had already ended.
pub(crate) fn frames(
    tail: Vec<Chunk>,
    live: Option<broadcast::Receiver<Event>>,
    ended: Option<ProcessInfo>,
) -> Response<Body> {
    let head = stream::iter(tail.into_iter().map(|c| line(&c.frame())));
    let end = stream::iter(ended.map(|info| line(&Frame::Exit { info })));
    let live = stream::unfold(live, |rx| async move {
        let mut rx = rx?;
        let frame = match rx.recv().await {
            Ok(Event::Chunk(c)) => c.frame(),
            Ok(Event::Exit(info)) => return Some((line(&Frame::Exit { info: *info }), None)),
            Err(RecvError::Lagged(skipped)) => Frame::Lagged { skipped },
            Err(RecvError::Closed) => return None,
        };
        Some((line(&frame), Some(rx)))
    });
    let body = from_stream(head.chain(live).chain(end));
    response(StatusCode::OK, "application/x-ndjson", body)
}
