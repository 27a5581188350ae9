//! `POST /v1/sandboxes`: validate, hold the idempotency key, create (queueing for
//! capacity up to `waitSeconds`), then deliver the sandbox and its `run`.

use super::deliver::{Answer, Delivery};
use super::Mode;
use crate::auth::{perm, Caller};
use crate::body::CreateBody;
use crate::error::{ApiError, JSON_BODY_LIMIT};
use crate::idempotency::{self, Begin};
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use sandboxd_dialect_common::json::{is_json, parse_strict, read_capped};
use sandboxd_dialect_common::JsonBodyError;
use serde_json::Value;
use tokio::sync::oneshot;

/// Idempotency keys of create are scoped to this operation.
const OPERATION: &str = "sandboxes.create";

pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    caller.require(perm::CREATE)?;
    let key = idempotency::key(&headers)?;
    let resume = idempotency::resume_from(&headers)?;
    let mode = Mode::from_accept(&headers);
    if !is_json(&headers) {
        return Err(JsonBodyError::UnsupportedMediaType.into());
    }
    let value: Value = parse_strict(&read_capped(body, JSON_BODY_LIMIT).await?)?;
    let parsed: CreateBody =
        serde_json::from_value(value.clone()).map_err(|e| ApiError::invalid(e.to_string()))?;
    let template = state
        .engine
        .get_template(&caller.ws, &parsed.template)
        .await?;
    let plan = parsed.plan(&template)?;
    let ticket = match key {
        None => None,
        Some(key) => {
            let hash = idempotency::request_hash(mode.as_str(), &value);
            match idempotency::begin(&state, &caller.ws, OPERATION, &key, hash, resume)? {
                Begin::Replay(answer) => return Ok(answer),
                Begin::Run(ticket) => Some(ticket),
            }
        }
    };
    // A create that runs a command folds its result like an exec: the same room in the
    // server's output budget, held by the delivery and then by the answer.
    let hold = match plan.run {
        Some(_) => {
            state
                .engine
                .reserve_output(&caller.ws, crate::run::MAX_RESULT_OUTPUT)
                .await?
        }
        None => sandboxd_engine::OutputHold::default(),
    };
    let (reply, answer) = oneshot::channel();
    let delivery = Delivery {
        state: state.clone(),
        ws: caller.ws.clone(),
        run: plan.run,
        mode,
        status: StatusCode::CREATED,
        answer: Answer::Sandbox,
        ticket,
        hold: hold.clone(),
    };
    // As the request's (its key's) task: a revoke of the key ends its run's stream.
    sandboxd_engine::request::spawn_for_request(async move {
        // A refusal drops the ticket unkept, so a retry runs again.
        match state
            .engine
            .create_queued(&delivery.ws, plan.request, Some(plan.requests), plan.wait)
            .await
        {
            Ok((sb, _)) => delivery.deliver(sb, reply).await,
            Err(e) => {
                let _ = reply.send(Err(e.into()));
            }
        }
    });
    let answer = answer.await.unwrap_or_else(|_| {
        Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            "the create task failed",
        ))
    });
    answer.map(|response| sandboxd_dialect_common::held(response, hold))
}
