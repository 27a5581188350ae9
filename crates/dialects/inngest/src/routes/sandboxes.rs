//! Create, list, get and destroy sandboxes.

use crate::error::ApiError;
use crate::extract::{ApiJson, ApiQuery, SandboxPath, Workspace};
use crate::openapi::{Data, Errors, List};
use crate::params::{canonical_uuid, validate_environment, validate_name, PageQuery};
use crate::views::SandboxView;
use crate::{render, views, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use sandboxd_engine::{CreateSandbox, Resources, SandboxStatus};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `POST /v2/sandboxes`: the spec's fields plus the SDK's `environment`, `secrets` and
/// `snapshotId` (a clone takes its resources from the snapshot when none are given), and
/// the extension `image`.
#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = CreateSandboxRequest)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateBody {
    /// 1-63 lowercase letters, digits, `_` or `-`.
    #[schema(pattern = "^[a-z0-9_-]{1,63}$")]
    name: String,
    /// vCPUs (required unless `snapshotId` is given).
    #[schema(minimum = 1)]
    vcpu: Option<u32>,
    /// Memory in MiB (required unless `snapshotId` is given).
    #[schema(minimum = 1)]
    memory_mb: Option<u32>,
    environment: Option<BTreeMap<String, String>>,
    secrets: Option<Vec<String>>,
    snapshot_id: Option<String>,
    /// Extension (not in the spec, which names no image on create): a stored image
    /// (`sandboxd images pull`) to start from; absent = the workspace's default image
    /// (`sandboxd workspace set-image`, else `default`). Reported back as `imageRef`.
    image: Option<String>,
    /// Extension (OpenRelay's `autoPause`): consent to be moved to disk when the host
    /// needs the memory, and woken by the next operation; gVisor sandboxes without
    /// egress only, a no-op elsewhere. Default false.
    auto_pause: Option<bool>,
}

impl CreateBody {
    pub(crate) fn into_request(self) -> Result<CreateSandbox, ApiError> {
        validate_name(&self.name)?;
        let environment = self.environment.unwrap_or_default();
        validate_environment(&environment)?;
        let snapshot_id = match self.snapshot_id.as_deref() {
            Some(raw) => Some(canonical_uuid(raw).ok_or_else(|| {
                ApiError::invalid_field("snapshotId must be a canonical lowercase UUID")
            })?),
            None => None,
        };
        let resources = match (self.vcpu, self.memory_mb, snapshot_id) {
            (Some(0), _, _) => return Err(ApiError::invalid_field("vcpu must be positive")),
            (_, Some(0), _) => return Err(ApiError::invalid_field("memoryMb must be positive")),
            (Some(vcpu), Some(memory_mb), _) => Resources { vcpu, memory_mb },
            // A clone without resources takes its snapshot's (filled in by `create`).
            (None, None, Some(_)) => Resources {
                vcpu: 0,
                memory_mb: 0,
            },
            _ => return Err(ApiError::invalid_request("vcpu and memoryMb are required")),
        };
        if self.image.as_ref().is_some_and(|i| i.is_empty()) {
            return Err(ApiError::invalid_field("image must not be empty"));
        }
        Ok(CreateSandbox {
            name: Some(self.name),
            resources,
            image: self.image,
            snapshot_id,
            environment,
            secrets: self.secrets.unwrap_or_default(),
            metadata: BTreeMap::new(),
            timeout: None,
            auto_pause: self.auto_pause.unwrap_or(false),
            network: None,
            egress: None,
            disk_mb: None,
            aliases: Default::default(),
            attributes: Default::default(),
            // The page names no such field: the workspace's default, else the server's.
            isolation: None,
        })
    }
}

#[utoipa::path(
    post,
    operation_id = "createSandbox",
    path = "/v2/sandboxes",
    tag = "sandboxes",
    summary = "Create a sandbox (an active sandbox with the same name and configuration is returned with 200)",
    request_body = CreateBody,
    responses((status = 201, description = "Created, RUNNING", body = Data<SandboxView>), (status = 200, description = "The existing sandbox of that name (same configuration)", body = Data<SandboxView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn create(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<Response, ApiError> {
    let mut request = body.into_request()?;
    // Creates name no image: the workspace's default (`sandboxd workspace set-image`).
    if request.image.is_none() && request.snapshot_id.is_none() {
        request.image = state.engine.workspace_image(&ws)?;
    }
    if let (Some(snapshot), 0) = (request.snapshot_id, request.resources.vcpu) {
        request.resources = state.engine.get_snapshot(&ws, snapshot).await?.resources;
    }
    let (sandbox, created_now) = state.engine.create(&ws, request).await?;
    let status = match (created_now, sandbox.status) {
        (false, _) => StatusCode::OK,
        (true, SandboxStatus::Running) => StatusCode::CREATED,
        (true, _) => StatusCode::ACCEPTED,
    };
    let mut view = views::sandbox(&sandbox);
    if status == StatusCode::ACCEPTED && sandbox.status == SandboxStatus::Pending {
        // Create reports only STARTING or RUNNING; PENDING is the start of STARTING. Only
        // the answer says so: the sandbox's state is the engine's.
        view.status = SandboxStatus::Starting.as_str();
    }
    Ok(render::data(status, view))
}

#[utoipa::path(
    get,
    operation_id = "listSandboxes",
    path = "/v2/sandboxes",
    tag = "sandboxes",
    summary = "List sandboxes (createdAt DESC, then id DESC; terminated ones included)",
    params(("limit" = Option<u32>, Query, minimum = 1, maximum = 250, description = "Page size, 1-250 (default 50)"), ("cursor" = Option<String>, Query, description = "Opaque cursor from the previous page")),
    responses((status = 200, body = List<SandboxView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn list(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response, ApiError> {
    let page = query.page()?;
    let limit = page.limit;
    let sandboxes = state.engine.list(&ws, page).await?;
    Ok(render::list(sandboxes, limit, views::sandbox))
}

#[utoipa::path(
    get,
    operation_id = "getSandbox",
    path = "/v2/sandboxes/{sandbox_id}",
    tag = "sandboxes",
    summary = "Get a sandbox",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)")),
    responses((status = 200, body = Data<SandboxView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn get(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
) -> Result<Response, ApiError> {
    let sandbox = state.engine.get(&ws, id).await?;
    Ok(render::data(StatusCode::OK, views::sandbox(&sandbox)))
}

#[utoipa::path(
    delete,
    operation_id = "destroySandbox",
    path = "/v2/sandboxes/{sandbox_id}",
    tag = "sandboxes",
    summary = "Destroy a sandbox",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)")),
    responses((status = 202, description = "TERMINATING", body = Data<SandboxView>), (status = 204, description = "Already terminated"), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn destroy(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
) -> Result<Response, ApiError> {
    let sandbox = state.engine.destroy(&ws, id).await?;
    if sandbox.status.is_terminal() {
        return Ok(render::no_content());
    }
    Ok(render::data(StatusCode::ACCEPTED, views::sandbox(&sandbox)))
}
