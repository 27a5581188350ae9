//! Delivering a sandbox and its command's outcome as one JSON answer or as a stream of
//! SandboxEvents, and keeping the answer for an idempotency key. The work runs in its
//! own task, so a client that disconnects does not cut the command or its record short.

use super::Mode;
use crate::body::RunSpec;
use crate::error::ApiError;
use crate::events::{Emitter, Event};
use crate::idempotency::Ticket;
use crate::{run, views, AppState};
use axum::body::Body;
use axum::http::{header::CONTENT_TYPE, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use sandboxd_engine::{Sandbox, WorkspaceId};
use tokio::sync::{mpsc, oneshot};

/// What a delivery answers in JSON mode.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The sandbox with its `result` (create).
    Sandbox,
    /// The result alone (exec).
    Result,
}

pub struct Delivery {
    pub state: AppState,
    pub ws: WorkspaceId,
    pub run: Option<RunSpec>,
    pub mode: Mode,
    pub status: StatusCode,
    pub answer: Answer,
    pub ticket: Option<Ticket>,
    /// Room in the server's output budget for the run's folded result, held by the
    /// delivery (which runs on after a client leaves) as long as it holds the result:
    /// held, never read (dropped with the delivery at the end of `deliver`).
    #[allow(dead_code)]
    pub hold: sandboxd_engine::OutputHold,
}

fn response(status: StatusCode, content_type: &'static str, body: Body) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

const JSON: &str = "application/json";
const NDJSON: &str = "application/x-ndjson";

impl Delivery {
    /// Runs in its own task; the response (streaming or whole) comes back through
    /// `reply` as soon as it can start.
    pub async fn deliver(self, sb: Sandbox, reply: oneshot::Sender<Result<Response, ApiError>>) {
        match self.mode {
            Mode::Json => {
                let mut quiet = Emitter::new(None);
                let result = match &self.run {
                    Some(r) => {
                        Some(run::run(&self.state.engine, &self.ws, sb.id, r, &mut quiet).await)
                    }
                    None => None,
                };
                let sb = self.state.engine.get(&self.ws, sb.id).await.unwrap_or(sb);
                let mut view = views::sandbox(&sb);
                view.result = result;
                let body = match self.answer {
                    Answer::Sandbox => serde_json::to_vec(&view),
                    Answer::Result => serde_json::to_vec(&view.result.unwrap_or_default()),
                }
                .unwrap_or_default();
                if let Some(t) = self.ticket {
                    t.finish(self.status, JSON, &body);
                }
                let _ = reply.send(Ok(response(self.status, JSON, Body::from(body))));
            }
            Mode::Ndjson => {
                let (tx, rx) = mpsc::channel::<bytes::Bytes>(64);
                let lines = futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
                });
                let body = Body::from_stream(lines.boxed());
                let _ = reply.send(Ok(response(self.status, NDJSON, body)));
                let mut out = Emitter::new(Some(tx));
                out.emit(Event::Sandbox {
                    sandbox: Box::new(views::sandbox(&sb)),
                })
                .await;
                if let Some(r) = &self.run {
                    run::run(&self.state.engine, &self.ws, sb.id, r, &mut out).await;
                }
                if let Some(t) = self.ticket {
                    t.finish(self.status, NDJSON, &out.recorded);
                }
            }
        }
    }
}
