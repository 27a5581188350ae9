//! Snapshots (SDK routes beyond the spec): create from a sandbox (with its memory on
//! gVisor, see `SnapshotView::memory`), list, get, delete.

use crate::error::ApiError;
use crate::extract::{ApiQuery, SandboxPath, SnapshotPath, Workspace};
use crate::openapi::{Data, Errors, List};
use crate::params::{validate_name, PageQuery};
use crate::views::SnapshotView;
use crate::{render, views, AppState};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use sandboxd_dialect_common::json::read_optional_json;
use serde::Deserialize;

#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = CreateSnapshotRequest)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// 1-128 printable characters.
    #[schema(min_length = 1, max_length = 128)]
    name: Option<String>,
}

/// `POST /v2/sandboxes/{id}/snapshots`, body optional (`{"name": …}`). Snapshots are
/// taken synchronously, so the answer is always 201 READY.
#[utoipa::path(
    post,
    operation_id = "createSnapshot",
    path = "/v2/sandboxes/{sandbox_id}/snapshots",
    tag = "sandboxd extensions",
    summary = "Snapshot a sandbox's filesystem, and on gVisor its memory (`memory`; sandboxes created from it start as forks) (not in the REST page; called by the inngest SDK); synchronous, READY",
    request_body(content = Option<CreateBody>, content_type = "application/json"),
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)")),
    responses((status = 201, body = Data<SnapshotView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
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

#[utoipa::path(
    get,
    operation_id = "listSnapshots",
    path = "/v2/snapshots",
    tag = "sandboxd extensions",
    summary = "List snapshots (createdAt DESC, then id DESC)",
    params(("limit" = Option<u32>, Query, minimum = 1, maximum = 250, description = "Page size, 1-250 (default 50)"), ("cursor" = Option<String>, Query, description = "Opaque cursor from the previous page"), ("name" = Option<String>, Query, description = "Only snapshots with this name")),
    responses((status = 200, body = List<SnapshotView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
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

#[utoipa::path(
    get,
    operation_id = "getSnapshot",
    path = "/v2/snapshots/{snapshot_id}",
    tag = "sandboxd extensions",
    summary = "Get a snapshot",
    params(("snapshot_id" = Uuid, Path, description = "Snapshot ID (canonical lowercase UUID)")),
    responses((status = 200, body = Data<SnapshotView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn get(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SnapshotPath(id): SnapshotPath,
) -> Result<Response, ApiError> {
    let snapshot = state.engine.get_snapshot(&ws, id).await?;
    Ok(render::data(StatusCode::OK, views::snapshot(&snapshot)))
}

#[utoipa::path(
    delete,
    operation_id = "deleteSnapshot",
    path = "/v2/snapshots/{snapshot_id}",
    tag = "sandboxd extensions",
    summary = "Delete a snapshot",
    params(("snapshot_id" = Uuid, Path, description = "Snapshot ID (canonical lowercase UUID)")),
    responses((status = 204, description = "Deleted"), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn delete(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SnapshotPath(id): SnapshotPath,
) -> Result<Response, ApiError> {
    state.engine.delete_snapshot(&ws, id).await?;
    Ok(render::no_content())
}
