//! Snapshots (SDK routes beyond the spec): create from a sandbox, list, get, delete.

use crate::error::ApiError;
use crate::extract::{ApiQuery, SandboxPath, SnapshotPath, Workspace};
use crate::params::{validate_name, PageQuery};
use crate::{render, views, AppState};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use sandboxd_dialect_common::json::read_optional_json;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    name: Option<String>,
}

/// `POST /v2/sandboxes/{id}/snapshots`, body optional (`{"name": …}`). Snapshots are
/// taken synchronously, so the answer is always 201 READY.
pub async fn create(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let body: Option<CreateBody> =
        read_optional_json(&parts.headers, body, crate::error::JSON_BODY_LIMIT).await?;
    let name = body.and_then(|b| b.name);
    if let Some(name) = &name {
        validate_name(name)?;
    }
    let snapshot = state.engine.snapshot(&ws, id, name).await?;
    Ok(render::data(
        StatusCode::CREATED,
        views::snapshot(&snapshot),
    ))
}

pub async fn list(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response, ApiError> {
    let page = query.page()?;
    if let Some(name) = &query.name {
        validate_name(name)?;
    }
    let limit = page.limit;
    let snapshots = state
        .engine
        .list_snapshots(&ws, query.name.as_deref(), page)
        .await?;
    Ok(render::list(snapshots, limit, views::snapshot))
}

pub async fn get(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SnapshotPath(id): SnapshotPath,
) -> Result<Response, ApiError> {
    let snapshot = state.engine.get_snapshot(&ws, id).await?;
    Ok(render::data(StatusCode::OK, views::snapshot(&snapshot)))
}

pub async fn delete(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SnapshotPath(id): SnapshotPath,
) -> Result<Response, ApiError> {
    state.engine.delete_snapshot(&ws, id).await?;
    Ok(render::no_content())
}
