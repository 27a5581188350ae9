//! Get, list, delete, pause and resume.

use super::sandbox_id;
use crate::auth::{perm, Caller};
use crate::error::ApiError;
use crate::meta::Attributes;
use crate::views::{self, SandboxView};
use crate::AppState;
use axum::extract::{Path, Query, State};
use axum::Json;
use sandboxd_engine::{PageRequest, Sandbox, IDEMPOTENCY_TTL};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// History is kept (visible) this long after a sandbox ends.
const HISTORY: time::Duration = IDEMPOTENCY_TTL;
const MAX_LIMIT: u32 = 100;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    state: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = SandboxList)]
#[serde(rename_all = "camelCase")]
pub struct ListView {
    sandboxes: Vec<SandboxView>,
    /// The next page's cursor; null on the last page.
    next_cursor: Option<String>,
}

fn ephemeral(sb: &Sandbox) -> bool {
    Attributes::of(sb).is_some_and(|a| a.ephemeral)
}

pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ListView>, ApiError> {
    caller.require(perm::READ)?;
    let Query(q) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let page = PageRequest {
        limit,
        cursor: q.cursor,
    };
    let got = match q.state.as_deref() {
        None | Some("active") => state.engine.list_active(&caller.ws, page).await?,
        Some("exited") => {
            let since = OffsetDateTime::now_utc() - HISTORY;
            state
                .engine
                .list_ended(&caller.ws, since, page, |s| !ephemeral(s))
                .await?
        }
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "state must be active or exited, not {other:?}"
            )))
        }
    };
    Ok(Json(ListView {
        sandboxes: got.items.iter().map(views::sandbox).collect(),
        next_cursor: got.next_cursor,
    }))
}

pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> Result<Json<SandboxView>, ApiError> {
    caller.require(perm::READ)?;
    let id = sandbox_id(&raw)?;
    let sb = state.engine.get(&caller.ws, id).await?;
    let too_old = sb
        .ended_at
        .is_some_and(|t| t < OffsetDateTime::now_utc() - HISTORY);
    if sb.status.is_terminal() && (ephemeral(&sb) || too_old) {
        return Err(ApiError::not_found(format!("sandbox {id} not found")));
    }
    Ok(Json(views::sandbox(&sb)))
}

/// Ends the sandbox (exitReason `killed`); an ended one is answered as it is.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> Result<Json<SandboxView>, ApiError> {
    caller.require(perm::DELETE)?;
    let sb = state.engine.destroy(&caller.ws, sandbox_id(&raw)?).await?;
    Ok(Json(views::sandbox(&sb)))
}

/// Freezes the sandbox; its timeout keeps counting.
pub async fn pause(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> Result<Json<SandboxView>, ApiError> {
    caller.require(perm::UPDATE)?;
    let sb = state.engine.pause(&caller.ws, sandbox_id(&raw)?).await?;
    Ok(Json(views::sandbox(&sb)))
}

pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> Result<Json<SandboxView>, ApiError> {
    caller.require(perm::UPDATE)?;
    let sb = state.engine.resume(&caller.ws, sandbox_id(&raw)?).await?;
    Ok(Json(views::sandbox(&sb)))
}

/// Live resource usage of a running or paused sandbox (a sandboxd extension).
pub async fn usage(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> Result<Json<sandboxd_dialect_common::usage::UsageView>, ApiError> {
    caller.require(perm::READ)?;
    let usage = state.engine.usage(&caller.ws, sandbox_id(&raw)?).await?;
    Ok(Json((&usage).into()))
}
