//! Create, get, list and delete of a tenant's sandboxes.

use crate::auth::{Reader, Writer};
use crate::error::{ApiError, Op};
use crate::extract::{OptionalJson, SandboxId};
use crate::views::SandboxView;
use crate::AppState;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_engine::{CreateSandbox, PageRequest, Resources};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Largest create body.
const CREATE_LIMIT: usize = 128 * 1024;
/// Longest sandbox lifetime a create may ask for (one day).
const MAX_TIMEOUT_SECONDS: u64 = 86_400;

/// `POST …/sandboxes` as sent; every field optional (and so is the body).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[schema(as = CreateSandboxRequest)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// Lifetime in seconds; the sandbox expires after it. None = until deleted.
    #[schema(minimum = 1, maximum = 86400)]
    timeout_seconds: Option<u64>,
    /// Environment of every command in the sandbox, as a command's `env`: up to 64
    /// variables, names `^[A-Za-z_][A-Za-z0-9_]{0,127}$`, values at most 8192 bytes
    /// without NUL.
    env: Option<BTreeMap<String, String>>,
    /// vCPUs (default 1).
    #[schema(minimum = 1)]
    vcpu: Option<u32>,
    /// Memory in MiB (default 512).
    #[schema(minimum = 1)]
    memory_mb: Option<u32>,
    /// Writable-layer size in MiB, 16 to the server's maximum (10 GiB unless
    /// configured; 0, no limit, only without a maximum); None = the server's default.
    disk_mb: Option<u32>,
    /// Extension: the image to start from (a stored reference, `sandboxd images pull`);
    /// None = the built-in `default`.
    image: Option<String>,
    /// Extension: consent to be moved to disk when the host needs the memory, and
    /// woken by the next operation (OpenRelay's `autoPause`); gVisor sandboxes without
    /// egress only, a no-op elsewhere. Default false.
    auto_pause: Option<bool>,
    /// Extension: the isolation tier, `container` or `gvisor`; None = the tenant's
    /// workspace default (`sandboxd workspace set-isolation`), else the server's.
    #[schema(pattern = "^(container|gvisor)$")]
    isolation: Option<String>,
}

impl CreateBody {
    /// Validates the body into the engine's request, with a fresh `sbx_` id as its alias.
    pub(crate) fn into_request(self) -> Result<CreateSandbox, ApiError> {
        let timeout = match self.timeout_seconds {
            None => None,
            Some(s) if (1..=MAX_TIMEOUT_SECONDS).contains(&s) => Some(Duration::from_secs(s)),
            Some(_) => return Err(ApiError::invalid("timeout_seconds must be 1-86400")),
        };
        if let Some(env) = &self.env {
            crate::exec_request::check_env(env)?;
        }
        let isolation = match self.isolation.as_deref().map(str::parse) {
            None => None,
            Some(Ok(tier)) => Some(tier),
            Some(Err(e)) => return Err(ApiError::invalid(format!("isolation: {e}"))),
        };
        Ok(CreateSandbox {
            name: None,
            resources: Resources {
                vcpu: self.vcpu.unwrap_or(1),
                memory_mb: self.memory_mb.unwrap_or(512),
            },
            image: self.image,
            snapshot_id: None,
            environment: self.env.unwrap_or_default(),
            secrets: Vec::new(),
            metadata: BTreeMap::new(),
            timeout,
            auto_pause: self.auto_pause.unwrap_or(false),
            network: None,
            egress: None,
            disk_mb: self.disk_mb,
            aliases: [(crate::ids::DIALECT.to_owned(), crate::ids::new_id())].into(),
            attributes: Default::default(),
            isolation,
        })
    }
}

fn view(sb: &sandboxd_engine::Sandbox, tenant: &str) -> Result<SandboxView, ApiError> {
    SandboxView::of(sb, tenant).ok_or_else(ApiError::not_found)
}

pub async fn create(
    State(state): State<AppState>,
    Writer(tenant): Writer,
    OptionalJson(body): OptionalJson<CreateBody, CREATE_LIMIT>,
) -> Result<Response, ApiError> {
    let req = body.unwrap_or_default().into_request()?;
    let (sb, _) = state
        .engine
        .create(&tenant.workspace, req)
        .await
        .map_err(|e| ApiError::engine(Op::Sandboxes, e))?;
    Ok((StatusCode::CREATED, Json(view(&sb, &tenant.tenant_id)?)).into_response())
}

pub async fn get(
    State(state): State<AppState>,
    Reader(tenant): Reader,
    SandboxId(id): SandboxId,
) -> Result<Json<SandboxView>, ApiError> {
    let sb = state.sandbox(&tenant.workspace, &id, Op::Sandboxes).await?;
    Ok(Json(view(&sb, &tenant.tenant_id)?))
}

pub async fn delete(
    State(state): State<AppState>,
    Writer(tenant): Writer,
    SandboxId(id): SandboxId,
) -> Result<Json<SandboxView>, ApiError> {
    let sb = state.sandbox(&tenant.workspace, &id, Op::Sandboxes).await?;
    let sb = state
        .engine
        .destroy(&tenant.workspace, sb.id)
        .await
        .map_err(|e| ApiError::engine(Op::Sandboxes, e))?;
    Ok(Json(view(&sb, &tenant.tenant_id)?))
}

/// `?limit=&cursor=` of a list.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<u32>,
    cursor: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = SandboxList)]
pub struct ListView {
    data: Vec<SandboxView>,
    /// The next page's cursor; null on the last page.
    next_cursor: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    Reader(tenant): Reader,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ListView>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    if q.limit.is_some_and(|l| !(1..=100).contains(&l)) {
        return Err(ApiError::invalid("limit must be 1-100"));
    }
    let page = state
        .engine
        .list_aliased(
            &tenant.workspace,
            Some(crate::ids::DIALECT),
            PageRequest {
                limit: q.limit.unwrap_or(50),
                cursor: q.cursor,
            },
        )
        .await
        .map_err(|e| ApiError::engine(Op::Sandboxes, e))?;
    let data = page
        .items
        .iter()
        .filter_map(|sb| SandboxView::of(sb, &tenant.tenant_id))
        .collect();
    Ok(Json(ListView {
        data,
        next_cursor: page.next_cursor,
    }))
}
