//! Pause and resume (SDK routes beyond the spec): the answer is the sandbox as it is
//! now, which the SDK polls until PAUSED or RUNNING.

use crate::error::ApiError;
use crate::extract::{SandboxPath, Workspace};
use crate::openapi::{Data, Errors};
use crate::views::SandboxView;
use crate::{render, views, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

#[utoipa::path(
    post,
    operation_id = "pauseSandbox",
    path = "/v2/sandboxes/{sandbox_id}/pause",
    tag = "sandboxd extensions",
    summary = "Pause a sandbox (not in the REST page; called by the inngest SDK): freezes every process, PAUSING then PAUSED",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)")),
    responses((status = 200, body = Data<SandboxView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn pause(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
) -> Result<Response, ApiError> {
    let sandbox = state.engine.pause(&ws, id).await?;
    Ok(render::data(StatusCode::OK, views::sandbox(&sandbox)))
}

#[utoipa::path(
    post,
    operation_id = "resumeSandbox",
    path = "/v2/sandboxes/{sandbox_id}/resume",
    tag = "sandboxd extensions",
    summary = "Resume a paused sandbox (not in the REST page; called by the inngest SDK): RESUMING then RUNNING",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)")),
    responses((status = 200, body = Data<SandboxView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn resume(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
) -> Result<Response, ApiError> {
    let sandbox = state.engine.resume(&ws, id).await?;
    Ok(render::data(StatusCode::OK, views::sandbox(&sandbox)))
}
