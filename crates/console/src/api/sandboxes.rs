//! Sandboxes: list, create (from a template or an image), get, delete, pause, resume,
//! snapshot.

use super::{reader, sandbox_id, writer};
use crate::error::ApiError;
use crate::session::Session;
use crate::Console;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use sandboxd_engine::{CreateSandbox, PageRequest, Resources, Sandbox};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use time::format_description::well_known::Rfc3339;

/// The dialect name under which the console keeps its own attributes.
const DIALECT: &str = "console";
/// Most sandboxes the table shows.
const LIST_MAX: usize = 500;

/// A sandbox as the console's table shows it.
#[derive(Serialize)]
pub struct View {
    id: String,
    name: Option<String>,
    status: &'static str,
    tier: &'static str,
    image: String,
    template: Option<String>,
    vcpu: u32,
    memory_mb: u32,
    disk_mb: Option<u32>,
    created_at: String,
    ended_at: Option<String>,
    expires_at: Option<String>,
    error: Option<String>,
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// The template a sandbox was made from, as its creator (the console or OpenRelay)
/// recorded it.
fn template_of(sb: &Sandbox) -> Option<String> {
    ["console", "openrelay"].iter().find_map(|d| {
        sb.attributes.get(*d)?["template"]
            .as_str()
            .map(str::to_owned)
    })
}

pub fn view(sb: &Sandbox) -> View {
    View {
        id: sb.id.to_string(),
        name: sb.name.clone(),
        status: sb.status.as_str(),
        tier: sb.isolation.as_str(),
        image: sb.image.clone(),
        template: template_of(sb),
        vcpu: sb.resources.vcpu,
        memory_mb: sb.resources.memory_mb,
        disk_mb: sb.disk_mb,
        created_at: rfc3339(sb.created_at),
        ended_at: sb.ended_at.map(rfc3339),
        expires_at: sb.expires_at.map(rfc3339),
        error: sb.error.clone(),
    }
}

pub async fn list(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
) -> Result<Json<Vec<View>>, ApiError> {
    let ws = reader(&s)?.to_owned();
    let mut out = Vec::new();
    let mut page = PageRequest {
        limit: 100,
        cursor: None,
    };
    loop {
        let got = c.engine.list(&ws, page.clone()).await?;
        out.extend(got.items.iter().map(view));
        match got.next_cursor {
            Some(next) if out.len() < LIST_MAX => page.cursor = Some(next),
            _ => break,
        }
    }
    Ok(Json(out))
}

/// What the create form sends.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// A template's name (built-in or the workspace's); excludes `image`.
    template: Option<String>,
    /// A stored image reference.
    image: Option<String>,
    name: Option<String>,
    vcpu: Option<u32>,
    memory_mb: Option<u32>,
    disk_mb: Option<u32>,
    /// Lifetime in seconds; none = until deleted.
    timeout_seconds: Option<u64>,
}

pub async fn create(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    body: Result<Json<CreateBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let ws = writer(&s)?.to_owned();
    let Json(b) = body.map_err(|e| ApiError::invalid(e.body_text()))?;
    let blank = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let (template, image, name) = (blank(b.template), blank(b.image), blank(b.name));
    let mut req = match (&template, image) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give a template or an image, not both"))
        }
        (Some(t), None) => {
            let t = c.engine.get_template(&ws, t).await?;
            let resources = Resources {
                vcpu: b.vcpu.unwrap_or(t.resources.vcpu),
                memory_mb: b.memory_mb.unwrap_or(t.resources.memory_mb),
            };
            if resources.vcpu > t.resources.vcpu || resources.memory_mb > t.resources.memory_mb {
                return Err(ApiError::invalid(format!(
                    "template {} allows at most {} vCPU and {} MiB",
                    t.name, t.resources.vcpu, t.resources.memory_mb
                )));
            }
            t.create_request(resources)
        }
        (None, image) => CreateSandbox {
            name: None,
            resources: Resources {
                vcpu: b.vcpu.unwrap_or(1),
                memory_mb: b.memory_mb.unwrap_or(512),
            },
            image,
            snapshot_id: None,
            environment: BTreeMap::new(),
            secrets: Vec::new(),
            metadata: BTreeMap::new(),
            timeout: None,
            auto_pause: false,
            network: None,
            egress: None,
            disk_mb: None,
            aliases: Default::default(),
            attributes: Default::default(),
            isolation: None,
        },
    };
    req.name = name;
    if b.disk_mb.is_some() {
        req.disk_mb = b.disk_mb;
    }
    req.timeout = match b.timeout_seconds {
        None | Some(0) => None,
        Some(s) if s <= 86_400 => Some(std::time::Duration::from_secs(s)),
        Some(_) => return Err(ApiError::invalid("timeout_seconds must be 1-86400")),
    };
    if let Some(t) = template {
        req.attributes
            .insert(DIALECT.to_owned(), serde_json::json!({ "template": t }));
    }
    let (sb, _) = c.engine.create(&ws, req).await?;
    Ok((StatusCode::CREATED, Json(view(&sb))).into_response())
}

pub async fn get(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
) -> Result<Json<View>, ApiError> {
    let ws = reader(&s)?.to_owned();
    let sb = c.engine.get(&ws, sandbox_id(&id)?).await?;
    Ok(Json(view(&sb)))
}

/// Which lifecycle operation a POST asks for.
#[derive(Clone, Copy)]
enum Op {
    Delete,
    Pause,
    Resume,
}

async fn act(c: &Console, s: &Session, id: &str, op: Op) -> Result<Json<View>, ApiError> {
    let ws = writer(s)?.to_owned();
    let id = sandbox_id(id)?;
    let sb = match op {
        Op::Delete => c.engine.destroy(&ws, id).await?,
        Op::Pause => c.engine.pause(&ws, id).await?,
        Op::Resume => c.engine.resume(&ws, id).await?,
    };
    Ok(Json(view(&sb)))
}

pub async fn delete(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
) -> Result<Json<View>, ApiError> {
    act(&c, &s, &id, Op::Delete).await
}

pub async fn pause(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
) -> Result<Json<View>, ApiError> {
    act(&c, &s, &id, Op::Pause).await
}

pub async fn resume(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
) -> Result<Json<View>, ApiError> {
    act(&c, &s, &id, Op::Resume).await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SnapshotBody {
    name: Option<String>,
}

pub async fn snapshot(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
    body: Result<Json<SnapshotBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let ws = writer(&s)?.to_owned();
    let Json(b) = body.map_err(|e| ApiError::invalid(e.body_text()))?;
    let name = b.name.filter(|n| !n.trim().is_empty());
    let snap = c.engine.snapshot(&ws, sandbox_id(&id)?, name).await?;
    let body = super::catalog::snapshot_view(&snap);
    Ok((StatusCode::CREATED, Json(body)).into_response())
}
