//! The terminal: a single-use ticket (bought with a CSRF-checked POST), then the PTY
//! over a WebSocket in the Runzivo dialect's protocol (binary keystrokes and output, a
//! text `{"type":"resize"}`, `{"type":"exit"}` at the end).

use super::{sandbox_id, writer};
use crate::error::ApiError;
use crate::session::Session;
use crate::Console;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use sandboxd_dialect_runzivo::tickets::{Grant, TICKET_TTL};
use serde::Deserialize;

pub async fn ticket(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let ws = writer(&s)?.to_owned();
    c.engine.get(&ws, sandbox_id(&id)?).await?;
    let grant = Grant {
        workspace: ws,
        sandbox_id: id,
    };
    let ticket = c.tickets.issue(grant, None, TICKET_TTL);
    let body = serde_json::json!({"ticket": ticket, "expires_in": TICKET_TTL.as_secs()});
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalQuery {
    ticket: String,
    cols: Option<u16>,
    rows: Option<u16>,
}

pub async fn terminal(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
    query: Result<Query<TerminalQuery>, axum::extract::rejection::QueryRejection>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let ws = writer(&s)?.to_owned();
    let Query(q) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let upgrade = upgrade.map_err(|e| ApiError::invalid(e.body_text()))?;
    let (cols, rows) = (q.cols.unwrap_or(80), q.rows.unwrap_or(24));
    if cols == 0 || rows == 0 {
        return Err(ApiError::invalid("cols and rows must be 1-65535"));
    }
    let grant = Grant {
        workspace: ws.clone(),
        sandbox_id: id.clone(),
    };
    if c.tickets.redeem(&q.ticket, &grant).is_none() {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "ticket_invalid",
            "the terminal ticket is used, expired or not for this sandbox",
        ));
    }
    let pty = c
        .engine
        .open_terminal(&ws, sandbox_id(&id)?, cols, rows)
        .await?;
    let upgrade = sandboxd_dialect_runzivo::terminal_upgrade(upgrade);
    Ok(upgrade.on_upgrade(move |socket| sandboxd_dialect_runzivo::terminal_bridge(socket, pty)))
}
