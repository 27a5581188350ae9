//! A sandbox's managed processes: list, start (`sh -c COMMAND`), and one process's
//! output, retained then live, as plain text streamed to the browser.

use super::{reader, sandbox_id, writer};
use crate::error::ApiError;
use crate::session::Session;
use crate::Console;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use futures_util::StreamExt;
use sandboxd_engine::{OutputEvent, PageRequest, ProcessExit, ProcessInfo, StartCommand};
use serde::Deserialize;
use serde_json::{json, Value};

/// Most processes listed.
const LIST_MAX: u32 = 100;

fn process_view(p: &ProcessInfo) -> Value {
    let exit = p.exit.map(|e| match e {
        ProcessExit::Code(c) => format!("exit {c}"),
        ProcessExit::Signal(s) => format!("signal {s}"),
    });
    json!({
        "id": p.id, "argv": p.argv, "pid": p.pid, "state": p.state.as_str(),
        "started_at": p.started_at, "ended_at": p.ended_at, "exit": exit,
        "output_retained": p.output_retained, "argv_truncated": p.argv_truncated,
    })
}

pub async fn list(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let ws = reader(&s)?.to_owned();
    let page = PageRequest {
        limit: LIST_MAX,
        cursor: None,
    };
    let got = c.engine.list_processes(&ws, sandbox_id(&id)?, page).await?;
    Ok(Json(got.items.iter().map(process_view).collect()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// A shell command line, run as `sh -c COMMAND`.
    command: String,
}

pub async fn start(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
    body: Result<Json<StartBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let ws = writer(&s)?.to_owned();
    let Json(b) = body.map_err(|e| ApiError::invalid(e.body_text()))?;
    if b.command.trim().is_empty() {
        return Err(ApiError::invalid("command is empty"));
    }
    let cmd = StartCommand {
        argv: vec!["/bin/sh".into(), "-c".into(), b.command],
        env: None,
        cwd: None,
    };
    let p = c.engine.start_process(&ws, sandbox_id(&id)?, cmd).await?;
    Ok((StatusCode::CREATED, Json(process_view(&p))).into_response())
}

/// The process's retained output, then live output until it ends; a gap and the end
/// are written as bracketed lines.
pub async fn output(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path((id, pid)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let ws = reader(&s)?.to_owned();
    let pid = pid
        .parse()
        .map_err(|_| ApiError::not_found("no such process"))?;
    let events = c
        .engine
        .process_output(&ws, sandbox_id(&id)?, pid, 0, true)
        .await?;
    let text = events.map(|e| {
        Ok::<_, std::io::Error>(match e {
            Ok(OutputEvent::Chunk(c)) => c.data,
            Ok(OutputEvent::Gap { from, to }) => {
                Bytes::from(format!("\n[{} bytes dropped]\n", to - from))
            }
            Ok(OutputEvent::Exit(Some(ProcessExit::Code(c)))) => {
                Bytes::from(format!("\n[exited {c}]\n"))
            }
            Ok(OutputEvent::Exit(Some(ProcessExit::Signal(s)))) => {
                Bytes::from(format!("\n[killed by signal {s}]\n"))
            }
            Ok(OutputEvent::Exit(None)) => Bytes::from_static(b"\n[ended]\n"),
            Err(e) => Bytes::from(format!("\n[{}]\n", e.message)),
        })
    });
    Ok((
        [(CONTENT_TYPE, "text/plain; charset=utf-8")],
        Body::from_stream(text),
    )
        .into_response())
}
