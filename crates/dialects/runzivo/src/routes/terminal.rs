//! The terminal: `POST …/terminal/tickets` (a key buys a single-use ticket) and
//! `GET …/terminal?ticket=…` (a WebSocket carrying the sandbox's PTY).

use crate::auth::Writer;
use crate::error::{ApiError, Op};
use crate::extract::SandboxId;
use crate::tickets::{Grant, TICKET_TTL};
use crate::AppState;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use sandboxd_engine::{Terminal, TerminalEvent};
use serde::Deserialize;
use std::collections::HashMap;

pub async fn ticket(
    State(state): State<AppState>,
    Writer(tenant): Writer,
    SandboxId(id): SandboxId,
) -> Result<Response, ApiError> {
    state.sandbox(&tenant.workspace, &id, Op::Exec).await?;
    let grant = Grant {
        workspace: tenant.workspace,
        sandbox_id: id,
    };
    let ticket = state.tickets.issue(grant, Some(tenant.key_id), TICKET_TTL);
    let body = serde_json::json!({"ticket": ticket, "expires_in": TICKET_TTL.as_secs()});
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `?ticket=…&cols=…&rows=…`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalQuery {
    ticket: Option<String>,
    cols: Option<u16>,
    rows: Option<u16>,
}

/// A resize message from the browser.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub(crate) enum Control {
    Resize { cols: u16, rows: u16 },
}

pub async fn terminal(
    State(state): State<AppState>,
    Path(params): Path<HashMap<String, String>>,
    query: Result<Query<TerminalQuery>, axum::extract::rejection::QueryRejection>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let ticket = q
        .ticket
        .filter(|t| !t.is_empty())
        .ok_or_else(ApiError::unauthorized)?;
    let upgrade = upgrade.map_err(|e| ApiError::invalid(e.body_text()))?;
    let (cols, rows) = (q.cols.unwrap_or(80), q.rows.unwrap_or(24));
    if cols == 0 || rows == 0 {
        return Err(ApiError::invalid("cols and rows must be 1-65535"));
    }
    let tenant = params.get("tenant_id").cloned().unwrap_or_default();
    let id = params.get("sandbox_id").cloned().unwrap_or_default();
    let workspace = state
        .engine
        .workspace_by_alias(crate::ids::DIALECT, &tenant)
        .map_err(|e| ApiError::engine(Op::Exec, e))?
        .map(|ws| ws.id)
        .unwrap_or_default();
    let grant = Grant {
        workspace: workspace.clone(),
        sandbox_id: id.clone(),
    };
    let Some(bought_by) = state.tickets.redeem(&ticket, &grant) else {
        return Err(ApiError::ticket_invalid());
    };
    // The terminal acts for the key that bought the ticket: refused once it is revoked,
    // and closed when it is revoked later.
    if let Some(key) = bought_by {
        let principal = state
            .engine
            .authenticate_key_id(key)
            .map_err(|e| ApiError::engine(Op::Exec, e))?;
        if principal.is_none() {
            return Err(ApiError::ticket_invalid());
        }
    }
    let sb = state.sandbox(&workspace, &id, Op::Exec).await?;
    let pty = state
        .engine
        .open_terminal(&workspace, sb.id, cols, rows)
        .await
        .map_err(|e| ApiError::engine(Op::Exec, e))?;
    Ok(bounded(upgrade).on_upgrade(move |socket| bridge(socket, pty)))
}

/// The most a terminal's client may send in one WebSocket frame.
pub const MAX_FRAME_BYTES: usize = 64 << 10;
/// The most in one message (its fragments together): keystrokes, a paste, a resize.
pub const MAX_MESSAGE_BYTES: usize = 256 << 10;

/// A terminal's upgrade with its client's frames and messages bounded: axum's defaults
/// (16 MiB a frame, 64 MiB a message) let one socket hold that much of the server's
/// memory with a message it never finishes (an outside audit held 1.9 GB with 24).
pub fn bounded(upgrade: WebSocketUpgrade) -> WebSocketUpgrade {
    upgrade
        .max_frame_size(MAX_FRAME_BYTES)
        .max_message_size(MAX_MESSAGE_BYTES)
}

/// Binary messages are keystrokes and screen output; a text message resizes; the
/// shell's exit sends `{"type":"exit","exit_code":N}` and closes the socket. The web
/// console's terminal speaks the same protocol through this function.
pub async fn bridge(socket: WebSocket, pty: Terminal) {
    let (mut ws_tx, mut ws_rx) = socket.split();
    let (mut pty_rd, mut pty_wr) = pty.split();
    let output = async move {
        loop {
            match pty_rd.next().await {
                Some(TerminalEvent::Output(d)) => {
                    if ws_tx.send(Message::Binary(d)).await.is_err() {
                        return;
                    }
                }
                Some(TerminalEvent::Exit(code)) => {
                    let text = serde_json::json!({"type": "exit", "exit_code": code});
                    let _ = ws_tx.send(Message::Text(text.to_string().into())).await;
                    let close = CloseFrame {
                        code: 1000,
                        reason: format!("exit {code}").into(),
                    };
                    let _ = ws_tx.send(Message::Close(Some(close))).await;
                    return;
                }
                Some(TerminalEvent::KeyRevoked) => {
                    let close = CloseFrame {
                        code: 1008,
                        reason: "the API key was revoked".into(),
                    };
                    let _ = ws_tx.send(Message::Close(Some(close))).await;
                    return;
                }
                None => return,
            }
        }
    };
    let input = async move {
        while let Some(Ok(msg)) = ws_rx.next().await {
            let sent = match msg {
                Message::Binary(d) => pty_wr.write(d).await,
                Message::Text(t) => match serde_json::from_str::<Control>(t.as_str()) {
                    Ok(Control::Resize { cols, rows }) if cols > 0 && rows > 0 => {
                        pty_wr.resize(cols, rows).await
                    }
                    _ => pty_wr.write(Bytes::copy_from_slice(t.as_bytes())).await,
                },
                Message::Close(_) => return,
                _ => continue,
            };
            if sent.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = output => {}
        _ = input => {}
    }
}
