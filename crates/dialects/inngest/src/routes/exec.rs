//! Captured command execution.

use crate::duration::parse_timeout;
use crate::error::ApiError;
use crate::extract::{ApiJson, SandboxPath, Workspace};
use crate::openapi::{Data, Errors};
use crate::params::ProcessSpec;
use crate::views::ExecView;
use crate::{render, views, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use sandboxd_engine::ExecCommand;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Longest `timeout` of Exec and Wait.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Default `timeout` of Exec and Wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Combined stdout+stderr cap of a captured command.
pub const MAX_EXEC_OUTPUT: u64 = 4 * 1024 * 1024;

#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = ExecRequest)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    /// The program (an absolute path) and its arguments; no NUL bytes.
    #[schema(min_items = 1)]
    command: Vec<String>,
    environment: Option<BTreeMap<String, String>>,
    /// Absolute working directory, at most 4096 bytes (empty: `/`).
    #[schema(max_length = 4096)]
    cwd: Option<String>,
    /// A Go duration, greater than zero, at most 5m (default 30s).
    timeout: Option<String>,
}

impl ExecBody {
    /// Validates the body into the engine's command (the 4 MiB cap, the timeout).
    pub(crate) fn into_command(self) -> Result<ExecCommand, ApiError> {
        let spec = ProcessSpec::parse(self.command, self.environment, self.cwd)?;
        Ok(ExecCommand {
            argv: spec.argv,
            env: spec.env,
            cwd: spec.cwd,
            timeout: timeout_or_default(self.timeout.as_deref())?,
            max_output_bytes: MAX_EXEC_OUTPUT,
        })
    }
}

/// Parses an optional Go-duration timeout: default 30s, greater than zero, at most 5m.
pub fn timeout_or_default(raw: Option<&str>) -> Result<Duration, ApiError> {
    match raw {
        None => Ok(DEFAULT_TIMEOUT),
        Some(raw) => parse_timeout(raw, MAX_TIMEOUT).map_err(|e| ApiError::invalid_field(e.0)),
    }
}

#[utoipa::path(
    post,
    operation_id = "execCommand",
    path = "/v2/sandboxes/{sandbox_id}/exec",
    tag = "commands",
    summary = "Run a command and capture its output (4 MiB cap, Go-duration timeout up to 5m)",
    request_body = ExecBody,
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)")),
    responses((status = 200, body = Data<ExecView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn exec(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
    ApiJson(body): ApiJson<ExecBody>,
) -> Result<Response, ApiError> {
    let command = body.into_command()?;
    let result = state.engine.exec(&ws, id, command).await?;
    // The answer keeps the exec's room in the server's output budget until it is sent.
    let hold = result.hold.clone();
    let answer = render::data(StatusCode::OK, views::exec(&result));
    drop(result);
    Ok(sandboxd_dialect_common::held(answer, hold))
}
