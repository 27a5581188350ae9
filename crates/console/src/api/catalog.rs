//! Templates (built-in and the workspace's) and snapshots.

use super::{reader, writer};
use crate::error::ApiError;
use crate::session::Session;
use crate::Console;
use axum::extract::{Path, State};
use axum::{Extension, Json};
use sandboxd_engine::{PageRequest, Snapshot};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;

pub fn snapshot_view(s: &Snapshot) -> Value {
    let at = |t: time::OffsetDateTime| t.format(&Rfc3339).unwrap_or_default();
    json!({
        "id": s.id, "name": s.name, "source_sandbox_id": s.source_sandbox_id,
        "image": s.image, "size_bytes": s.size_bytes, "vcpu": s.resources.vcpu,
        "memory_mb": s.resources.memory_mb, "created_at": at(s.created_at),
        "expires_at": s.expires_at.map(at), "memory": s.has_memory(),
    })
}

pub async fn templates(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let ws = reader(&s)?.to_owned();
    let all = c.engine.list_templates(&ws).await?;
    Ok(Json(
        all.iter()
            .map(|t| {
                json!({
                    "name": t.name, "description": t.description, "builtin": t.builtin,
                    "vcpu": t.resources.vcpu, "memory_mb": t.resources.memory_mb,
                    "image": t.image, "disk_mb": t.disk_mb,
                })
            })
            .collect(),
    ))
}

pub async fn snapshots(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let ws = reader(&s)?.to_owned();
    let page = PageRequest {
        limit: 100,
        cursor: None,
    };
    let got = c.engine.list_snapshots(&ws, None, page).await?;
    Ok(Json(got.items.iter().map(snapshot_view).collect()))
}

pub async fn delete_snapshot(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let ws = writer(&s)?.to_owned();
    let id = id
        .parse()
        .map_err(|_| ApiError::not_found("no such snapshot"))?;
    c.engine.delete_snapshot(&ws, id).await?;
    Ok(Json(json!({"deleted": id})))
}

/// The images stored in the data directory (name, manifest digest, bytes of its
/// layers), read like `sandboxd images list` does; the built-in one is listed once used.
pub async fn images(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
) -> Result<Json<Vec<Value>>, ApiError> {
    reader(&s)?;
    let dir = c.engine.data_dir().to_path_buf();
    let listed = tokio::task::spawn_blocking(move || {
        let images = sandboxd_images::Images::open(&dir)?;
        let views = images
            .list()
            .iter()
            .map(|image| {
                let bytes: u64 = image.layers.iter().map(|l| images.layer_size(l)).sum();
                json!({
                    "name": image.name, "digest": image.config.manifest_digest,
                    "layers": image.layers.len(), "size_bytes": bytes,
                })
            })
            .collect::<Vec<Value>>();
        Ok::<_, sandboxd_images::ImageError>(views)
    })
    .await;
    match listed {
        Ok(Ok(views)) => Ok(Json(views)),
        Ok(Err(e)) => Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "images_unavailable",
            format!("reading the image store: {e}"),
        )),
        Err(e) => Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "images_unavailable",
            format!("reading the image store: {e}"),
        )),
    }
}
