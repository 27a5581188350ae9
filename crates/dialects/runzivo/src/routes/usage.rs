//! `GET …/sandboxes/{sandboxId}/metrics` (a sandboxd extension): the sandbox's live
//! resource usage, snake_case like the rest of the dialect.

use crate::auth::Reader;
use crate::error::{ApiError, Op};
use crate::extract::SandboxId;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use sandboxd_dialect_common::rfc3339_nanos;
use serde::Serialize;

/// Live usage of one sandbox, read from its cgroup, writable layer and interfaces.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = SandboxMetrics)]
pub struct UsageView {
    /// When it was read (RFC 3339).
    #[schema(format = DateTime)]
    pub at: String,
    /// CPU time used since the sandbox started, in seconds.
    pub cpu_seconds: f64,
    /// CPU use over the last interval in percent of one CPU (up to `vcpu` × 100).
    pub cpu_percent: f64,
    /// Length of that interval (since the last reading, or 500 ms for a first one).
    pub interval_ms: u64,
    pub vcpu: u32,
    pub memory_bytes: u64,
    pub memory_peak_bytes: u64,
    pub memory_limit_bytes: u64,
    pub pids: u64,
    pub pids_limit: u64,
    pub disk_used_bytes: u64,
    /// Absent when the writable layer has no size limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_limit_bytes: Option<u64>,
    pub network_rx_bytes: u64,
    pub network_tx_bytes: u64,
}

/// The usage of a running or paused sandbox of the tenant.
pub async fn usage(
    State(state): State<AppState>,
    Reader(tenant): Reader,
    SandboxId(id): SandboxId,
) -> Result<Json<UsageView>, ApiError> {
    let sb = state.sandbox(&tenant.workspace, &id, Op::Sandboxes).await?;
    let u = state
        .engine
        .usage(&tenant.workspace, sb.id)
        .await
        .map_err(|e| ApiError::engine(Op::Sandboxes, e))?;
    Ok(Json(UsageView {
        at: rfc3339_nanos(u.at),
        cpu_seconds: u.cpu_seconds,
        cpu_percent: u.cpu_percent,
        interval_ms: u.interval_ms,
        vcpu: u.vcpu,
        memory_bytes: u.memory_bytes,
        memory_peak_bytes: u.memory_peak_bytes,
        memory_limit_bytes: u.memory_limit_bytes,
        pids: u.pids,
        pids_limit: u.pids_limit,
        disk_used_bytes: u.disk_used_bytes,
        disk_limit_bytes: u.disk_limit_bytes,
        network_rx_bytes: u.net_rx_bytes,
        network_tx_bytes: u.net_tx_bytes,
    }))
}
