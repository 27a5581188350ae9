//! Managed processes: start, list, get, signal and wait.

use crate::error::ApiError;
use crate::extract::{ApiJson, ApiQuery, ProcessPath, SandboxPath, Workspace};
use crate::openapi::{Data, Errors, List};
use crate::params::{PageQuery, ProcessSpec};
use crate::routes::exec::timeout_or_default;
use crate::views::ProcessView;
use crate::{render, views, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use sandboxd_engine::StartCommand;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = StartProcessRequest)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// The program (an absolute path) and its arguments; no NUL bytes.
    #[schema(min_items = 1)]
    command: Vec<String>,
    environment: Option<BTreeMap<String, String>>,
    /// Absolute working directory, at most 4096 bytes (empty: `/`).
    #[schema(max_length = 4096)]
    cwd: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = SignalRequest)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignalBody {
    /// The signal number, 1 through 64.
    #[schema(minimum = 1, maximum = 64)]
    signal: i64,
    #[serde(default)]
    include_children: bool,
}

impl StartBody {
    /// Validates the body into the engine's command.
    pub(crate) fn into_command(self) -> Result<StartCommand, ApiError> {
        let spec = ProcessSpec::parse(self.command, self.environment, self.cwd)?;
        Ok(StartCommand {
            argv: spec.argv,
            env: spec.env,
            cwd: spec.cwd,
        })
    }
}

impl SignalBody {
    /// The signal number, 1 through 64.
    pub(crate) fn signal(&self) -> Result<i32, ApiError> {
        i32::try_from(self.signal)
            .ok()
            .filter(|s| (1..=64).contains(s))
            .ok_or_else(|| ApiError::invalid_field("signal must be an integer from 1 through 64"))
    }
}

#[derive(Deserialize)]
pub struct WaitQuery {
    timeout: Option<String>,
}

#[utoipa::path(
    post,
    operation_id = "startProcess",
    path = "/v2/sandboxes/{sandbox_id}/processes",
    tag = "processes",
    summary = "Start a background process",
    request_body = StartBody,
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)")),
    responses((status = 201, body = Data<ProcessView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn start(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
    ApiJson(body): ApiJson<StartBody>,
) -> Result<Response, ApiError> {
    let command = body.into_command()?;
    let process = state.engine.start_process(&ws, id, command).await?;
    Ok(render::data(StatusCode::CREATED, views::process(&process)))
}

#[utoipa::path(
    get,
    operation_id = "listProcesses",
    path = "/v2/sandboxes/{sandbox_id}/processes",
    tag = "processes",
    summary = "List processes (by process UUID)",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)"), ("limit" = Option<u32>, Query, minimum = 1, maximum = 250, description = "Page size, 1-250 (default 50)"), ("cursor" = Option<String>, Query, description = "Opaque cursor from the previous page")),
    responses((status = 200, body = List<ProcessView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
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

#[utoipa::path(
    get,
    operation_id = "getProcess",
    path = "/v2/sandboxes/{sandbox_id}/processes/{process_id}",
    tag = "processes",
    summary = "Get a process",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)"), ("process_id" = Uuid, Path, description = "Process ID (canonical lowercase UUID)")),
    responses((status = 200, body = Data<ProcessView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn get(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    ProcessPath(id, pid): ProcessPath,
) -> Result<Response, ApiError> {
    let process = state.engine.get_process(&ws, id, pid).await?;
    Ok(render::data(StatusCode::OK, views::process(&process)))
}

#[utoipa::path(
    post,
    operation_id = "signalProcess",
    path = "/v2/sandboxes/{sandbox_id}/processes/{process_id}/signals",
    tag = "processes",
    summary = "Send a signal (1-64) to a process, optionally its children",
    request_body = SignalBody,
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)"), ("process_id" = Uuid, Path, description = "Process ID (canonical lowercase UUID)")),
    responses((status = 204, description = "Delivered"), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn signal(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    ProcessPath(id, pid): ProcessPath,
    ApiJson(body): ApiJson<SignalBody>,
) -> Result<Response, ApiError> {
    let signal = body.signal()?;
    state
        .engine
        .signal_process(&ws, id, pid, signal, body.include_children)
        .await?;
    Ok(render::no_content())
}

#[utoipa::path(
    post,
    operation_id = "waitProcess",
    path = "/v2/sandboxes/{sandbox_id}/processes/{process_id}/wait",
    tag = "processes",
    summary = "Wait for a process to end (504 sandbox_process_wait_timed_out leaves it running)",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)"), ("process_id" = Uuid, Path, description = "Process ID (canonical lowercase UUID)"), ("timeout" = Option<String>, Query, description = "Go duration")),
    responses((status = 200, body = Data<ProcessView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
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
