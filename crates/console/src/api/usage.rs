//! Live usage of the workspace's running sandboxes, one reading each, for the
//! sandboxes table's CPU and memory sparklines (the script keeps the history).

use super::reader;
use crate::error::ApiError;
use crate::session::Session;
use crate::Console;
use axum::extract::State;
use axum::{Extension, Json};
use futures_util::stream::{self, StreamExt};
use sandboxd_engine::{PageRequest, SandboxStatus, SandboxUsage};
use serde::Serialize;

/// Most sandboxes read per request.
const MAX: usize = 200;
/// Readings taken at once (a first reading of a sandbox waits half a second).
const PARALLEL: usize = 16;

/// One sandbox's reading, as the table draws it.
#[derive(Serialize)]
pub struct UsageView {
    id: String,
    cpu_percent: f64,
    vcpu: u32,
    memory_bytes: u64,
    memory_limit_bytes: u64,
}

impl From<SandboxUsage> for UsageView {
    fn from(u: SandboxUsage) -> Self {
        UsageView {
            id: u.sandbox_id.to_string(),
            cpu_percent: u.cpu_percent,
            vcpu: u.vcpu,
            memory_bytes: u.memory_bytes,
            memory_limit_bytes: u.memory_limit_bytes,
        }
    }
}

/// `GET /console/api/usage`: a reading of each RUNNING sandbox of the session's
/// workspace (one that ends meanwhile is left out).
pub async fn usage(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
) -> Result<Json<Vec<UsageView>>, ApiError> {
    let ws = reader(&s)?.to_owned();
    let mut ids = Vec::new();
    let mut page = PageRequest {
        limit: 100,
        cursor: None,
    };
    loop {
        let got = c.engine.list(&ws, page.clone()).await?;
        ids.extend(
            got.items
                .iter()
                .filter(|sb| sb.status == SandboxStatus::Running)
                .map(|sb| sb.id),
        );
        match got.next_cursor {
            Some(next) if ids.len() < MAX => page.cursor = Some(next),
            _ => break,
        }
    }
    ids.truncate(MAX);
    let engine = &c.engine;
    let ws = &ws;
    let readings: Vec<UsageView> = stream::iter(ids)
        .map(|id| async move { engine.usage(ws, id).await.ok().map(UsageView::from) })
        .buffer_unordered(PARALLEL)
        .filter_map(|u| async move { u })
        .collect()
        .await;
    Ok(Json(readings))
}
