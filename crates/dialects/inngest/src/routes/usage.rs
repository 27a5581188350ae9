//! `GET /v2/sandboxes/{sandbox_id}/metrics` (a sandboxd extension): the sandbox's live
//! resource usage in the dialect's envelope.

use crate::error::ApiError;
use crate::extract::{SandboxPath, Workspace};
use crate::openapi::{Data, Errors};
use crate::{render, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use sandboxd_dialect_common::usage::UsageView;

#[utoipa::path(
    get,
    operation_id = "getSandboxMetrics",
    path = "/v2/sandboxes/{sandbox_id}/metrics",
    tag = "sandboxd extensions",
    summary = "Live resource usage of a RUNNING or PAUSED sandbox (not in the REST page): CPU seconds and percent over the last interval, memory current and peak, tasks, writable-layer disk use and limit, network bytes",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)")),
    responses((status = 200, body = Data<UsageView>), (status = "4XX", description = "Error (see `code`); 409 `sandbox_not_running` when it is neither RUNNING nor PAUSED", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn usage(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
) -> Result<Response, ApiError> {
    let usage = state.engine.usage(&ws, id).await?;
    Ok(render::data(StatusCode::OK, UsageView::from(&usage)))
}
