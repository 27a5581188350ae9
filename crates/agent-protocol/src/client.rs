//! Async client for the agent protocol over a Unix socket: short calls reuse kept
//! HTTP/1.1 connections (`pool`), streams get one of their own.

use crate::limits::{self, SMALL_ANSWER_BYTES};
use crate::pool;
use crate::query::encode_component;
use crate::transport::{self, Body};
use crate::types::*;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use http_body_util::{BodyExt, BodyStream, StreamBody};
use hyper::{Method, Request};
use std::path::PathBuf;
use std::time::Duration;
use uuid::Uuid;

const SIGKILL: i32 = 9;

/// A stream of NDJSON frames decoded from the agent.
pub type FrameStream = BoxStream<'static, Result<Frame, ClientError>>;
/// A stream of raw bytes (file bodies).
pub type ByteStream = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// What can go wrong talking to an agent.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The agent answered with a typed error.
    #[error("agent error {}: {}", .0.code_str(), .0.message)]
    Agent(AgentError),
    /// The socket could not be reached (agent gone, sandbox frozen…).
    #[error("cannot reach agent at {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The agent answered something that does not follow the protocol.
    #[error("agent protocol violation: {0}")]
    Protocol(String),
    /// The request's own body, a stream the caller gave (an upload), failed before its
    /// end: the caller's client broke off, or the caller cut it. Nothing the agent did.
    #[error("the request's body failed: {0}")]
    RequestBody(String),
    /// An answer read whole (or one line of a stream) passed its cap: the call fails
    /// rather than hold an agent's answer of any size in memory.
    #[error("the agent's answer passed {limit} bytes")]
    TooLarge { limit: u64 },
}

impl ClientError {
    /// The agent's error code, when the agent answered with one.
    pub fn agent_code(&self) -> Option<AgentErrorCode> {
        match self {
            ClientError::Agent(e) => Some(e.code),
            _ => None,
        }
    }
}

impl AgentError {
    /// The code as its wire string.
    pub fn code_str(&self) -> String {
        serde_json::to_value(self.code)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// Client bound to one agent socket path.
#[derive(Debug, Clone)]
pub struct AgentClient {
    socket: PathBuf,
}

impl AgentClient {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
        }
    }

    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    fn request(&self, method: Method, uri: &str, body: Body) -> Result<Request<Body>, ClientError> {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(http::header::HOST, "agent")
            .body(body)
            .map_err(|e| ClientError::Protocol(format!("cannot build request: {e}")))
    }

    /// A call on a connection of its own (streams, uploads, downloads).
    async fn call(
        &self,
        method: Method,
        uri: &str,
        body: Body,
    ) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
        transport::send(&self.socket, self.request(method, uri, body)?).await
    }

    /// A short call (body in memory, answer read whole, at most `limit` bytes) on a
    /// kept connection; its JSON answer decoded.
    async fn short<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        uri: &str,
        body: Body,
        limit: u64,
    ) -> Result<T, ClientError> {
        let req = self.request(method, uri, body)?;
        let (status, body) = pool::exchange(&self.socket, req, limit).await?;
        transport::parse(&transport::check(status, body)?)
    }

    /// Opens a kept connection ahead of the first short call, unless one is kept.
    pub async fn preconnect(&self) {
        pool::preconnect(&self.socket).await;
    }

    pub async fn health(&self) -> Result<Health, ClientError> {
        let body = transport::empty();
        self.short(Method::GET, "/v1/health", body, SMALL_ANSWER_BYTES)
            .await
    }

    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecResult, ClientError> {
        let limit = limits::exec_answer_bytes(req.max_output_bytes);
        self.short(Method::POST, "/v1/exec", transport::json(req)?, limit)
            .await
    }

    pub async fn start_process(&self, req: &StartProcess) -> Result<ProcessInfo, ClientError> {
        let body = transport::json(req)?;
        self.short(Method::POST, "/v1/processes", body, SMALL_ANSWER_BYTES)
            .await
    }

    /// Starts a process and follows its output from the first byte until `Exit`, in
    /// one exchange (as its holder when `hold_output`): on a kept connection when one
    /// is idle, kept again once the stream has been read to its end. An agent of an
    /// earlier build answers the start alone: its output is then followed as
    /// [`AgentClient::output_from`] does. A `ClientError::Agent` (a typed refusal)
    /// leaves nothing running, so a caller need not kill anything after one; any other
    /// error may leave the process running (the caller kills it).
    pub async fn start_following(&self, req: &StartProcess) -> Result<FrameStream, ClientError> {
        let uri = "/v1/processes?follow=true";
        let request = self.request(Method::POST, uri, transport::json(req)?)?;
        let (resp, connection) = pool::stream(&self.socket, request).await?;
        let status = resp.status();
        if status.is_success() && transport::is_ndjson(&resp) {
            return Ok(kept_after(transport::frames(resp), connection));
        }
        let body = transport::collect(resp, SMALL_ANSWER_BYTES).await?;
        connection.keep();
        let _started: ProcessInfo = transport::parse(&transport::check(status, body)?)?;
        match self.output_from(req.id, 0, req.hold_output).await {
            // Kept to the one exchange's promise (the agent kills what it started before
            // refusing the follow): a caller trusts a typed refusal to leave nothing.
            Err(refused @ ClientError::Agent(_)) => {
                let kill = SignalRequest {
                    signal: SIGKILL,
                    group: true,
                };
                match self.signal(req.id, &kill).await {
                    Ok(()) => Err(refused),
                    // Not killed: no typed refusal then, so that the caller's own kill
                    // runs (the process may still run).
                    Err(ClientError::Agent(e)) => Err(ClientError::Protocol(format!(
                        "{refused}, and killing what the start began was refused: {}",
                        e.message
                    ))),
                    Err(unreached) => Err(unreached),
                }
            }
            followed => followed,
        }
    }

    pub async fn list_processes(&self) -> Result<Vec<ProcessInfo>, ClientError> {
        self.list_processes_page(None, 0).await
    }

    /// At most `limit` managed processes (0: all) sorted by id, those after `after`; an
    /// answer past [`limits::process_page_answer_bytes`] of `limit` is `TooLarge`.
    pub async fn list_processes_page(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<ProcessInfo>, ClientError> {
        let uri = match after {
            Some(a) => format!("/v1/processes?after={a}&limit={limit}"),
            None => format!("/v1/processes?limit={limit}"),
        };
        let cap = limits::process_page_answer_bytes(limit);
        self.short(Method::GET, &uri, transport::empty(), cap).await
    }

    pub async fn get_process(&self, id: Uuid) -> Result<ProcessInfo, ClientError> {
        let uri = format!("/v1/processes/{id}");
        self.short(Method::GET, &uri, transport::empty(), SMALL_ANSWER_BYTES)
            .await
    }

    pub async fn signal(&self, id: Uuid, req: &SignalRequest) -> Result<(), ClientError> {
        let uri = format!("/v1/processes/{id}/signal");
        let (status, body) = pool::exchange(
            &self.socket,
            self.request(Method::POST, &uri, transport::json(req)?)?,
            SMALL_ANSWER_BYTES,
        )
        .await?;
        transport::check(status, body).map(drop)
    }

    /// Waits until the process is terminal; `Agent(WaitTimedOut)` when `timeout` passes.
    pub async fn wait(&self, id: Uuid, timeout: Duration) -> Result<ProcessInfo, ClientError> {
        let uri = format!("/v1/processes/{id}/wait?timeout_ms={}", timeout.as_millis());
        self.short(Method::POST, &uri, transport::empty(), SMALL_ANSWER_BYTES)
            .await
    }

    /// Retained output (whole chunks within `tail_bytes`, 0 = all), then live output when
    /// `follow`, ending with an `Exit` frame.
    pub async fn output(
        &self,
        id: Uuid,
        tail_bytes: u64,
        follow: bool,
    ) -> Result<FrameStream, ClientError> {
        let uri = format!("/v1/processes/{id}/output?tail_bytes={tail_bytes}&follow={follow}");
        Ok(transport::frames(
            self.call(Method::GET, &uri, transport::empty()).await?,
        ))
    }

    /// Output from byte offset `from` on (a dropped offset yields a `Gap` frame first),
    /// then live output until `Exit`. With `hold`, this reader is the holder of a
    /// process started with `hold_output`: the process waits for it instead of its
    /// ring dropping bytes (the hold is released when this stream is dropped).
    pub async fn output_from(
        &self,
        id: Uuid,
        from: u64,
        hold: bool,
    ) -> Result<FrameStream, ClientError> {
        let uri = format!("/v1/processes/{id}/output?from={from}&follow=true&hold={hold}");
        Ok(transport::frames(
            self.call(Method::GET, &uri, transport::empty()).await?,
        ))
    }

    /// The sandbox-level log ring, then live frames when `follow`.
    pub async fn logs(&self, follow: bool) -> Result<FrameStream, ClientError> {
        let uri = format!("/v1/logs?follow={follow}");
        Ok(transport::frames(
            self.call(Method::GET, &uri, transport::empty()).await?,
        ))
    }

    pub async fn read_file(&self, path: &str) -> Result<(FileMeta, ByteStream), ClientError> {
        let uri = format!("/v1/files?path={}", encode_component(path));
        let resp = self.call(Method::GET, &uri, transport::empty()).await?;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .ok_or_else(|| ClientError::Protocol(format!("missing header {name}")))
        };
        let bad = |name: &str| ClientError::Protocol(format!("bad header {name}"));
        let meta = FileMeta {
            size: header("content-length")?
                .parse()
                .map_err(|_| bad("content-length"))?,
            mode: u32::from_str_radix(&header("x-file-mode")?, 8)
                .map_err(|_| bad("x-file-mode"))?,
            mtime: header("x-file-mtime")?
                .parse()
                .map_err(|_| bad("x-file-mtime"))?,
        };
        let body = BodyStream::new(resp.into_body())
            .try_filter_map(|frame| async move { Ok(frame.into_data().ok()) })
            .map_err(std::io::Error::other)
            .boxed();
        Ok((meta, body))
    }

    pub async fn write_file(
        &self,
        path: &str,
        mode: u32,
        body: ByteStream,
    ) -> Result<FileWritten, ClientError> {
        let uri = format!("/v1/files?path={}&mode={mode:o}", encode_component(path));
        let body = BodyExt::boxed_unsync(StreamBody::new(body.map_ok(hyper::body::Frame::data)));
        let resp = self.call(Method::PUT, &uri, body).await?;
        transport::decode(resp, SMALL_ANSWER_BYTES).await
    }
}

/// `frames`, its connection kept for the next call once they have been read to their
/// end (an `Exit` is passed on at once, the body's end read after it on a task of its
/// own); closed with them when they break or are dropped before.
fn kept_after(frames: FrameStream, connection: pool::Streaming) -> FrameStream {
    /// How long the body's end may take after its `Exit` before the connection is shut.
    const END_AFTER_EXIT: Duration = Duration::from_secs(1);
    futures_util::stream::unfold(Some((frames, connection)), |state| async move {
        let (mut frames, connection) = state?;
        match frames.next().await {
            Some(Ok(frame @ Frame::Exit { .. })) => {
                tokio::spawn(async move {
                    let end = tokio::time::timeout(END_AFTER_EXIT, frames.next()).await;
                    if let Ok(None) = end {
                        connection.keep();
                    }
                });
                Some((Ok(frame), None))
            }
            Some(Ok(frame)) => Some((Ok(frame), Some((frames, connection)))),
            Some(Err(e)) => Some((Err(e), None)),
            None => {
                connection.keep();
                None
            }
        }
    })
    .boxed()
}
