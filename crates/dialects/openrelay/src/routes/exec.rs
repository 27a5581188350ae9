//! `POST /v1/sandboxes/{id}/exec`: a command in a running sandbox, answered like a
//! create's `run` (JSON result, or SandboxEvents as NDJSON).

use super::deliver::{Answer, Delivery};
use super::{sandbox_id, Mode};
use crate::auth::{perm, Caller};
use crate::body::{RunSpec, SHELL, SHELL_PURPOSE};
use crate::error::{ApiError, JSON_BODY_LIMIT};
use crate::AppState;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use sandboxd_dialect_common::read_json;
use sandboxd_engine::{missing_shell, SandboxStatus};
use tokio::sync::oneshot;

pub async fn exec(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    caller.require(perm::EXEC)?;
    let id = sandbox_id(&raw)?;
    let spec: RunSpec = read_json(&headers, body, JSON_BODY_LIMIT).await?;
    spec.argv()?;
    let sb = state.engine.get(&caller.ws, id).await?;
    if sb.status != SandboxStatus::Running {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "INVALID_STATE",
            format!(
                "sandbox {id} is {}; exec needs it running",
                crate::views::state(sb.status)
            ),
        ));
    }
    // A shell line needs the image's /bin/sh (the built-in image always has it).
    if spec.cmd.is_some()
        && sb.image != "default"
        && !state.engine.has_file(&caller.ws, id, SHELL).await?
    {
        return Err(missing_shell(SHELL, SHELL_PURPOSE).into());
    }
    // Past the workspace's cap of long-lived requests: its 429, not a result's error.
    state.engine.check_in_flight(&caller.ws)?;
    // The folded result (up to 4 MiB of output, then its JSON) holds room in the
    // server's output budget until the answer is sent.
    let hold = state
        .engine
        .reserve_output(&caller.ws, crate::run::MAX_RESULT_OUTPUT)
        .await?;
    let (reply, answer) = oneshot::channel();
    let delivery = Delivery {
        state: state.clone(),
        ws: caller.ws,
        run: Some(spec),
        mode: Mode::from_accept(&headers),
        status: StatusCode::OK,
        answer: Answer::Result,
        ticket: None,
        hold: hold.clone(),
    };
    // As the request's (its key's) task: a revoke of the key ends its run's stream.
    sandboxd_engine::request::spawn_for_request(delivery.deliver(sb, reply));
    let answer = answer.await.unwrap_or_else(|_| {
        Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            "the exec task failed",
        ))
    });
    answer.map(|response| sandboxd_dialect_common::held(response, hold))
}
