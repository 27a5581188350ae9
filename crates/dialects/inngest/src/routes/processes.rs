//! Managed processes: start, list, get, signal and wait.

use crate::error::ApiError;
use crate::extract::{ApiJson, ApiQuery, ProcessPath, SandboxPath, Workspace};
use crate::params::{PageQuery, ProcessSpec};
use crate::routes::exec::timeout_or_default;
use crate::{render, views, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use sandboxd_engine::StartCommand;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    command: Vec<String>,
    environment: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignalBody {
    signal: i64,
    #[serde(default)]
    include_children: bool,
}

#[derive(Deserialize)]
pub struct WaitQuery {
    timeout: Option<String>,
}

pub async fn start(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
    ApiJson(body): ApiJson<StartBody>,
) -> Result<Response, ApiError> {
    let spec = ProcessSpec::parse(body.command, body.environment, body.cwd)?;
    let command = StartCommand {
        argv: spec.argv,
        env: spec.env,
        cwd: spec.cwd,
    };
    let process = state.engine.start_process(&ws, id, command).await?;
    Ok(render::data(StatusCode::CREATED, views::process(&process)))
}

pub async fn list(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response, ApiError> {
    let page = query.page()?;
    let limit = page.limit;
    let processes = state.engine.list_processes(&ws, id, page).await?;
    Ok(render::list(processes, limit, views::process))
}

pub async fn get(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    ProcessPath(id, pid): ProcessPath,
) -> Result<Response, ApiError> {
    let process = state.engine.get_process(&ws, id, pid).await?;
    Ok(render::data(StatusCode::OK, views::process(&process)))
}

pub async fn signal(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    ProcessPath(id, pid): ProcessPath,
    ApiJson(body): ApiJson<SignalBody>,
) -> Result<Response, ApiError> {
    let signal = i32::try_from(body.signal)
        .ok()
        .filter(|s| (1..=64).contains(s))
        .ok_or_else(|| ApiError::invalid_field("signal must be an integer from 1 through 64"))?;
    state
        .engine
        .signal_process(&ws, id, pid, signal, body.include_children)
        .await?;
    Ok(render::no_content())
}

pub async fn wait(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    ProcessPath(id, pid): ProcessPath,
    ApiQuery(query): ApiQuery<WaitQuery>,
) -> Result<Response, ApiError> {
    let timeout = timeout_or_default(query.timeout.as_deref())?;
    let process = state.engine.wait_process(&ws, id, pid, timeout).await?;
    Ok(render::data(StatusCode::OK, views::process(&process)))
}
