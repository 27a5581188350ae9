//! `GET /v1/sandbox-templates` (built-ins and the workspace's own), and sandboxd's
//! additions to build (`POST`) and delete workspace templates.

use crate::auth::{perm, Caller};
use crate::error::{ApiError, JSON_BODY_LIMIT};
use crate::views::{self, TemplateView};
use crate::AppState;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use sandboxd_dialect_common::read_json;
use sandboxd_engine::{Resources, TemplateBuild};
use serde::{Deserialize, Serialize};
use std::time::Duration;

const DEFAULT_STEP_TIMEOUT: u64 = 600;
const MAX_STEP_TIMEOUT: u64 = 3600;

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = TemplateList)]
pub struct ListView {
    templates: Vec<TemplateView>,
}

pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<ListView>, ApiError> {
    caller.require(perm::TEMPLATES_READ)?;
    let all = state.engine.list_templates(&caller.ws).await?;
    Ok(Json(ListView {
        templates: all.iter().map(views::template).collect(),
    }))
}

/// A template build: steps run with `/bin/sh -c` in a sandbox of `from`.
#[derive(Deserialize, utoipa::ToSchema)]
#[schema(as = BuildTemplateRequest)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuildBody {
    /// The new template's id: 1-63 of `a-z`, `0-9`, `-`, `_`; not a built-in's.
    #[schema(pattern = "^[a-z0-9_-]{1,63}$")]
    name: String,
    /// The template to start from (default `default`).
    from: Option<String>,
    /// Build steps, each run by `/bin/sh -c` in order (none with `fromSandbox`).
    #[serde(default)]
    run: Vec<String>,
    /// sandboxd's extension: make the template from a snapshot of this running sandbox
    /// instead of building it (no `from`, `run`, `cpu`, `memoryMiB`, `diskMiB`: those
    /// are the sandbox's). On gVisor the snapshot keeps the sandbox's memory, so the
    /// template's sandboxes start as forks of it, its processes running (and without
    /// network); on the container tier it keeps its files.
    from_sandbox: Option<String>,
    /// vCPUs of the template's sandboxes (default: the base template's).
    #[schema(minimum = 1)]
    cpu: Option<u32>,
    /// Memory in MiB of the template's sandboxes (default: the base template's).
    #[serde(rename = "memoryMiB")]
    #[schema(minimum = 1)]
    memory_mib: Option<u32>,
    /// sandboxd's extension: the disk of the template's sandboxes (0: no limit).
    #[serde(rename = "diskMiB")]
    disk_mib: Option<u32>,
    /// Time limit of each step in seconds (default 600).
    #[schema(minimum = 1, maximum = 3600)]
    step_timeout_seconds: Option<u64>,
    /// sandboxd's extension: the isolation tier of the build and of every sandbox made
    /// from the template, `container` or `gvisor` (absent: the base template's, else
    /// the workspace's default, else the server's, at each create).
    #[schema(pattern = "^(container|gvisor)$")]
    isolation: Option<String>,
}

pub async fn build(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<TemplateView>), ApiError> {
    caller.require(perm::TEMPLATES_WRITE)?;
    let b: BuildBody = read_json(&headers, body, JSON_BODY_LIMIT).await?;
    if let Some(raw) = &b.from_sandbox {
        // It snapshots that sandbox (on gVisor with its memory, secrets included) and
        // stops it while it does: the sandbox's own permissions are needed too.
        caller.require(perm::READ)?;
        caller.require(perm::UPDATE)?;
        let building = b.from.is_some() || !b.run.is_empty() || b.cpu.is_some();
        if building || b.memory_mib.is_some() || b.disk_mib.is_some() {
            return Err(ApiError::invalid(
                "fromSandbox takes the sandbox's files, resources and disk: \
                 from, run, cpu, memoryMiB and diskMiB must be absent",
            ));
        }
        let id = crate::routes::sandbox_id(raw)?;
        let t = state
            .engine
            .template_from_sandbox(&caller.ws, &b.name, id)
            .await?;
        return Ok((StatusCode::CREATED, Json(views::template(&t))));
    }
    let step = b.step_timeout_seconds.unwrap_or(DEFAULT_STEP_TIMEOUT);
    if !(1..=MAX_STEP_TIMEOUT).contains(&step) {
        return Err(ApiError::invalid(format!(
            "stepTimeoutSeconds must be 1 to {MAX_STEP_TIMEOUT}"
        )));
    }
    let isolation = crate::body::isolation(b.isolation.as_deref())?;
    let from = b.from.unwrap_or_else(|| "default".into());
    let base = state.engine.get_template(&caller.ws, &from).await?;
    let resources = Resources {
        vcpu: b.cpu.unwrap_or(base.resources.vcpu),
        memory_mb: b.memory_mib.unwrap_or(base.resources.memory_mb),
    };
    let build = TemplateBuild {
        name: b.name,
        from,
        steps: b.run,
        resources: Some(resources),
        disk_mb: b.disk_mib,
        step_timeout: Duration::from_secs(step),
        isolation,
    };
    let t = state.engine.build_template(&caller.ws, build).await?;
    Ok((StatusCode::CREATED, Json(views::template(&t))))
}

pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<TemplateView>, ApiError> {
    caller.require(perm::TEMPLATES_WRITE)?;
    // The path names the template: a missing one is 404, not the 400 that a body's
    // `template` field naming nothing gets.
    let t = state
        .engine
        .delete_template(&caller.ws, &name)
        .await
        .map_err(|e| match e.code {
            sandboxd_engine::ErrorCode::ImageNotFound => ApiError::not_found(e.message),
            _ => e.into(),
        })?;
    Ok(Json(views::template(&t)))
}
