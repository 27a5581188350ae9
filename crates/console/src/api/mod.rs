//! `/console/api/…`: JSON endpoints for the console's script, behind the session
//! cookie, each calling one engine operation in the session's workspace.

mod account;
mod catalog;
mod files;
mod processes;
mod sandboxes;
mod terminal;
mod usage;

use crate::error::ApiError;
use crate::session::Session;
use crate::Console;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use sandboxd_engine::Principal;

/// Permission to change sandboxes, as the dialects name it.
const WRITE: &str = "sandboxes:write";
/// Permission to read sandboxes.
const READ: &str = "sandboxes:read";

/// Whether the session's principal may act with `permission` in its workspace (the
/// same rule the dialects apply to a key).
fn check(principal: &Principal, ws: &str, permission: &str) -> Result<(), ApiError> {
    let implied = permission == READ && principal.allows(WRITE);
    match principal.can_use(ws) && (principal.allows(permission) || implied) {
        true => Ok(()),
        false => Err(ApiError::forbidden(format!(
            "the {permission} permission is required"
        ))),
    }
}

/// A session allowed to read.
fn reader(s: &Session) -> Result<&str, ApiError> {
    check(&s.principal, &s.workspace, READ).map(|()| s.workspace.as_str())
}

/// A session allowed to change.
fn writer(s: &Session) -> Result<&str, ApiError> {
    check(&s.principal, &s.workspace, WRITE).map(|()| s.workspace.as_str())
}

/// The signed-in workspace and the CSRF token the script sends back.
async fn session(Extension(s): Extension<Session>) -> Json<serde_json::Value> {
    Json(serde_json::json!({"workspace": s.workspace, "csrf_token": s.csrf}))
}

pub fn router(state: Console) -> Router<Console> {
    let sb = "/console/api/sandboxes/{id}";
    Router::new()
        .route("/console/api/session", get(session))
        .route(
            "/console/api/sandboxes",
            get(sandboxes::list).post(sandboxes::create),
        )
        .route("/console/api/usage", get(usage::usage))
        .route(sb, get(sandboxes::get).delete(sandboxes::delete))
        .route(&format!("{sb}/pause"), post(sandboxes::pause))
        .route(&format!("{sb}/resume"), post(sandboxes::resume))
        .route(&format!("{sb}/snapshot"), post(sandboxes::snapshot))
        .route(
            &format!("{sb}/processes"),
            get(processes::list).post(processes::start),
        )
        .route(
            &format!("{sb}/processes/{{pid}}/output"),
            get(processes::output),
        )
        .route(&format!("{sb}/files/list"), get(files::list))
        .route(
            &format!("{sb}/files/content"),
            get(files::download).put(files::upload),
        )
        .route(&format!("{sb}/terminal/tickets"), post(terminal::ticket))
        .route(&format!("{sb}/terminal"), get(terminal::terminal))
        .route("/console/api/account", get(account::account))
        .route("/console/api/templates", get(catalog::templates))
        .route("/console/api/images", get(catalog::images))
        .route("/console/api/snapshots", get(catalog::snapshots))
        .route(
            "/console/api/snapshots/{id}",
            axum::routing::delete(catalog::delete_snapshot),
        )
        // A catch-all route rather than a fallback: the server merges every router,
        // and only one of them may have a fallback.
        .route(
            "/console/api/{*rest}",
            axum::routing::any(|| async { ApiError::not_found("no such console endpoint") }),
        )
        .layer(axum::middleware::from_fn_with_state(
            state,
            crate::session::require,
        ))
}

/// A sandbox id from the path.
fn sandbox_id(raw: &str) -> Result<uuid::Uuid, ApiError> {
    raw.parse().map_err(|_| {
        ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            "sandbox_not_found",
            "no such sandbox",
        )
    })
}
