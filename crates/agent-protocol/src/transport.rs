//! HTTP/1.1 exchanges over Unix-socket connections (see `pool` for kept ones), and
//! body and NDJSON decoding, each read capped (see `limits`).

use crate::client::{ClientError, FrameStream};
use crate::limits::{MAX_FRAME_BYTES, SMALL_ANSWER_BYTES};
use crate::types::{AgentError, Frame};
use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, BodyStream, Empty, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::path::Path;

/// Request body type the client sends.
pub(crate) type Body = UnsyncBoxBody<Bytes, std::io::Error>;

pub(crate) fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

pub(crate) fn json<T: serde::Serialize>(value: &T) -> Result<Body, ClientError> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| ClientError::Protocol(format!("cannot encode request: {e}")))?;
    Ok(Full::new(Bytes::from(bytes))
        .map_err(|never| match never {})
        .boxed_unsync())
}

/// Connects, sends `req`, and returns the response when it is a success; a non-2xx
/// answer is decoded into `ClientError::Agent`. The connection serves this one call.
pub(crate) async fn send(
    socket: &Path,
    req: Request<Body>,
) -> Result<Response<Incoming>, ClientError> {
    let mut sender = open(socket).await?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| request_failed(&e))?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status();
    Err(agent_error(
        status,
        &collect(resp, SMALL_ANSWER_BYTES).await?,
    ))
}

/// A new connection to the agent at `socket`, its HTTP/1 handshake done.
pub(crate) async fn open(socket: &Path) -> Result<SendRequest<Body>, ClientError> {
    let stream = crate::socket_path::connect_async(socket)
        .await
        .map_err(|source| ClientError::Connect {
            path: socket.to_owned(),
            source,
        })?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ClientError::Protocol(format!("handshake failed: {e}")))?;
    tokio::spawn(async move {
        // The connection ends when the agent or the last sender lets go; its error, if
        // any, surfaces through the response or body the caller awaits.
        let _ = conn.await;
    });
    Ok(sender)
}

pub(crate) fn request_failed(e: &hyper::Error) -> ClientError {
    // hyper's user error caused by the body stream we gave it (whose errors are
    // `io::Error`s): the caller's upload failed. Its other user errors with a cause (a
    // dispatch task gone: a runtime shut down, a panic) are no caller's doing.
    let body_failed = std::error::Error::source(e)
        .and_then(|c| c.downcast_ref::<std::io::Error>())
        .filter(|_| e.is_user());
    if let Some(cause) = body_failed {
        return ClientError::RequestBody(cause.to_string());
    }
    ClientError::Protocol(format!("request failed: {e}"))
}

/// The body of a success; a non-2xx answer decoded into `ClientError::Agent`.
pub(crate) fn check(status: StatusCode, body: Bytes) -> Result<Bytes, ClientError> {
    if status.is_success() {
        return Ok(body);
    }
    Err(agent_error(status, &body))
}

/// The error a non-2xx answer carries.
fn agent_error(status: StatusCode, body: &[u8]) -> ClientError {
    match serde_json::from_slice::<AgentError>(body) {
        Ok(err) => ClientError::Agent(err),
        Err(_) => ClientError::Protocol(format!("HTTP {status} without an agent error body")),
    }
}

/// Whether an answer is an NDJSON stream (a JSON answer or error is not).
pub(crate) fn is_ndjson(resp: &Response<Incoming>) -> bool {
    resp.headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/x-ndjson"))
}

/// Reads a whole response body of at most `limit` bytes; `TooLarge` as soon as it
/// declares or sends more (the rest is never read, and the connection is not kept).
pub(crate) async fn collect(resp: Response<Incoming>, limit: u64) -> Result<Bytes, ClientError> {
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    Limited::new(resp.into_body(), cap)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| match e.downcast::<LengthLimitError>() {
            Ok(_) => ClientError::TooLarge { limit },
            Err(e) => ClientError::Protocol(format!("cannot read body: {e}")),
        })
}

/// Decodes a JSON response body of at most `limit` bytes.
pub(crate) async fn decode<T: serde::de::DeserializeOwned>(
    resp: Response<Incoming>,
    limit: u64,
) -> Result<T, ClientError> {
    parse(&collect(resp, limit).await?)
}

/// Decodes a JSON body already read.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(body).map_err(|e| ClientError::Protocol(format!("bad JSON: {e}")))
}

/// An NDJSON body being split into lines: `buf[..scanned]` is known to hold no newline
/// (each byte is looked at once, however long a line grows).
struct Lines {
    body: BodyStream<Incoming>,
    buf: BytesMut,
    scanned: usize,
    done: bool,
}

/// Turns an NDJSON body into a stream of frames, decoding each line as it completes; a
/// line longer than [`MAX_FRAME_BYTES`] ends the stream with `TooLarge`.
pub(crate) fn frames(resp: Response<Incoming>) -> FrameStream {
    let state = Lines {
        body: BodyStream::new(resp.into_body()),
        buf: BytesMut::new(),
        scanned: 0,
        done: false,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(at) = s.buf[s.scanned..].iter().position(|b| *b == b'\n') {
                let pos = s.scanned + at;
                let line = s.buf.split_to(pos + 1);
                s.scanned = 0;
                let line = &line[..pos];
                if line.is_empty() {
                    continue;
                }
                return Some((decode_frame(line), s));
            }
            s.scanned = s.buf.len();
            if s.buf.len() as u64 > MAX_FRAME_BYTES {
                (s.buf, s.scanned, s.done) = (BytesMut::new(), 0, true);
                let err = ClientError::TooLarge {
                    limit: MAX_FRAME_BYTES,
                };
                return Some((Err(err), s));
            }
            if s.done {
                if s.buf.has_remaining() {
                    let rest = s.buf.split();
                    s.scanned = 0;
                    return Some((decode_frame(&rest), s));
                }
                return None;
            }
            match s.body.next().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        s.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => {
                    let err = ClientError::Protocol(format!("stream broken: {e}"));
                    (s.buf, s.scanned, s.done) = (BytesMut::new(), 0, true);
                    return Some((Err(err), s));
                }
                None => s.done = true,
            }
        }
    })
    .boxed()
}

fn decode_frame(line: &[u8]) -> Result<Frame, ClientError> {
    serde_json::from_slice::<Frame>(line)
        .map_err(|e| ClientError::Protocol(format!("bad frame: {e}")))
}
