//! Response bodies: JSON, typed errors, raw and NDJSON streams.

use bytes::Bytes;
use futures_util::stream::{Stream, StreamExt};
use http::{Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use sandboxd_agent_protocol::AgentError;
use std::io;

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

/// An NDJSON body of frames already encoded as lines.
pub(crate) fn ndjson(
    lines: impl Stream<Item = io::Result<Bytes>> + Send + 'static,
) -> Response<Body> {
    response(StatusCode::OK, "application/x-ndjson", from_stream(lines))
}
