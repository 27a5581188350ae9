//! Pause and resume (SDK routes beyond the spec): the answer is the sandbox as it is
//! now, which the SDK polls until PAUSED or RUNNING.

use crate::error::ApiError;
use crate::extract::{SandboxPath, Workspace};
use crate::{render, views, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

pub async fn pause(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
) -> Result<Response, ApiError> {
    let sandbox = state.engine.pause(&ws, id).await?;
    Ok(render::data(StatusCode::OK, views::sandbox(&sandbox)))
}

pub async fn resume(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
) -> Result<Response, ApiError> {
    let sandbox = state.engine.resume(&ws, id).await?;
    Ok(render::data(StatusCode::OK, views::sandbox(&sandbox)))
}
