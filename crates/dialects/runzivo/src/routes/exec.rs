//! `POST …/sandboxes/{sandboxId}/exec`: `bash -lc` streamed as NDJSON lines.

use crate::auth::Writer;
use crate::error::{ApiError, Op};
use crate::exec_request::{ExecBody, BODY_LIMIT};
use crate::extract::{ApiJson, SandboxId};
use crate::AppState;
use axum::extract::State;
use axum::response::Response;
use base64::Engine as _;
use futures_util::StreamExt;
use sandboxd_dialect_common::ndjson_body;
use sandboxd_engine::{ExecEvent, OnCap, SandboxEnd, StreamCommand, StreamKind};
use serde::Serialize;
use std::time::Duration;

/// Output passed on before the command is killed (code 137, `truncated`).
pub const MAX_OUTPUT_BYTES: u64 = 8 * 1024 * 1024;
/// The `exit_code` of a stream cut before its command ended (the key was revoked).
pub const CUT_EXIT: i32 = -1;
/// Commands running at once in one sandbox.
pub const MAX_SESSIONS: usize = 4;

/// One NDJSON line of the answer.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Line {
    Stdout {
        data: String,
    },
    Stderr {
        data: String,
    },
    Exit {
        exit_code: i32,
        timed_out: bool,
        truncated: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'static str>,
    },
}

fn line(event: ExecEvent) -> Line {
    match event {
        ExecEvent::Output { stream, data } => {
            let data = base64::engine::general_purpose::STANDARD.encode(data);
            match stream {
                StreamKind::Stdout => Line::Stdout { data },
                StreamKind::Stderr => Line::Stderr { data },
            }
        }
        // Not the command's end (it runs on): an exit line with no code of its own, whose
        // reason says why the stream ended.
        ExecEvent::KeyRevoked => Line::Exit {
            exit_code: CUT_EXIT,
            timed_out: false,
            truncated: false,
            reason: Some("key_revoked"),
        },
        ExecEvent::Exit(end) => Line::Exit {
            exit_code: end.exit_code,
            timed_out: end.timed_out,
            truncated: end.truncated,
            reason: end.sandbox_ended.map(|r| match r {
                SandboxEnd::Stopped => "stopped",
                SandboxEnd::Expired => "expired",
                SandboxEnd::Deleted => "deleted",
            }),
        },
    }
}

/// The shell that runs exec's `cmd` (as `bash -lc`).
const SHELL: &str = "/bin/bash";
const SHELL_PURPOSE: &str = "runs exec's cmd (bash -lc)";

pub async fn exec(
    State(state): State<AppState>,
    Writer(tenant): Writer,
    SandboxId(id): SandboxId,
    ApiJson(body): ApiJson<ExecBody, BODY_LIMIT>,
) -> Result<Response, ApiError> {
    let req = body.validate()?;
    let sb = state.sandbox(&tenant.workspace, &id, Op::Exec).await?;
    let cmd = StreamCommand {
        argv: vec![SHELL.into(), "-lc".into(), req.cmd],
        env: req.env,
        cwd: Some(req.cwd),
        timeout: Duration::from_secs(req.timeout_seconds),
        kill_grace: state.options.exec_kill_grace,
        max_output_bytes: MAX_OUTPUT_BYTES,
        on_cap: OnCap::Kill,
        max_sessions: MAX_SESSIONS,
    };
    let events = match state
        .engine
        .exec_stream(&tenant.workspace, sb.id, cmd)
        .await
    {
        Ok(events) => events,
        Err(e) => {
            let e = state
                .engine
                .explain_missing_shell(&tenant.workspace, sb.id, SHELL, SHELL_PURPOSE, e)
                .await;
            return Err(ApiError::engine(Op::Exec, e));
        }
    };
    Ok(ndjson_body(events.map(line)))
}
