//! Process output (retained, and tail-and-follow) and sandbox logs.

use crate::error::ApiError;
use crate::extract::{ApiQuery, ProcessPath, SandboxPath, Workspace};
use crate::frames::{api_frames, gap_error};
use crate::openapi::{Data, Errors, StreamFrameDoc};
use crate::params::{parse_follow, parse_tail_bytes};
use crate::{render, views, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::StreamExt;
use sandboxd_dialect_common::ndjson_body;
use sandboxd_engine::OutputEvent;
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TailQuery {
    tail_bytes: Option<String>,
}

#[derive(Deserialize)]
pub struct FollowQuery {
    follow: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Chunks {
    chunks: Vec<views::ChunkView>,
}

/// `GET …/output`: the retained output as one JSON document.
#[utoipa::path(
    get,
    operation_id = "getProcessOutput",
    path = "/v2/sandboxes/{sandbox_id}/processes/{process_id}/output",
    tag = "processes",
    summary = "Retained output (whole chunks within tailBytes)",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)"), ("process_id" = Uuid, Path, description = "Process ID (canonical lowercase UUID)"), ("tailBytes" = Option<u32>, Query, minimum = 0, maximum = 524288, description = "0-524288; 0 = everything retained")),
    responses((status = 200, body = Data<Chunks>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn retained(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    ProcessPath(id, pid): ProcessPath,
    ApiQuery(query): ApiQuery<TailQuery>,
) -> Result<Response, ApiError> {
    let tail = parse_tail_bytes(query.tail_bytes.as_deref())?;
    let mut events = state
        .engine
        .process_output(&ws, id, pid, tail, false)
        .await?;
    let mut chunks = Vec::new();
    while let Some(event) = events.next().await {
        match event? {
            OutputEvent::Chunk(c) => chunks.push(views::chunk(&c)),
            // The ring moved on while it was read: say so rather than leave a hole.
            OutputEvent::Gap { from, to } => return Err(gap_error(from, to).into()),
            OutputEvent::Exit(_) => {}
        }
    }
    Ok(render::data(StatusCode::OK, Chunks { chunks }))
}

/// `GET …/output/stream`: the retained tail, then live output, as NDJSON.
#[utoipa::path(
    get,
    operation_id = "streamProcessOutput",
    path = "/v2/sandboxes/{sandbox_id}/processes/{process_id}/output/stream",
    tag = "processes",
    summary = "Retained tail, then live output until the process ends",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)"), ("process_id" = Uuid, Path, description = "Process ID (canonical lowercase UUID)"), ("tailBytes" = Option<u32>, Query, minimum = 0, maximum = 524288, description = "0-524288")),
    responses((status = 200, description = "NDJSON frames", content_type = "application/x-ndjson", body = StreamFrameDoc), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn stream(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    ProcessPath(id, pid): ProcessPath,
    ApiQuery(query): ApiQuery<TailQuery>,
) -> Result<Response, ApiError> {
    let tail = parse_tail_bytes(query.tail_bytes.as_deref())?;
    let frames = state
        .engine
        .process_output(&ws, id, pid, tail, true)
        .await?;
    Ok(ndjson_body(api_frames(frames)))
}

/// `GET /v2/sandboxes/{id}/logs?follow=`: the sandbox's output as NDJSON.
#[utoipa::path(
    get,
    operation_id = "streamSandboxLogs",
    path = "/v2/sandboxes/{sandbox_id}/logs",
    tag = "logs",
    summary = "Stream the sandbox log: every command's and process's output in order, from a bounded ring; with follow=true, until the sandbox ends",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)"), ("follow" = Option<bool>, Query, description = "true or false (default false)")),
    responses((status = 200, description = "NDJSON frames", content_type = "application/x-ndjson", body = StreamFrameDoc), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn logs(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
    ApiQuery(query): ApiQuery<FollowQuery>,
) -> Result<Response, ApiError> {
    let follow = parse_follow(query.follow.as_deref())?;
    let frames = state.engine.logs(&ws, id, follow).await?;
    Ok(ndjson_body(api_frames(frames)))
}
