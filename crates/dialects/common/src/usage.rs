//! A sandbox's live resource usage as the camelCase dialects (Inngest, OpenRelay) render
//! it: the engine's [`SandboxUsage`] field for field.

use crate::time_fmt::rfc3339_nanos;
use sandboxd_engine::SandboxUsage;
use serde::Serialize;

/// Live usage of one sandbox, read from its cgroup, writable layer and interfaces.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = SandboxUsage)]
#[serde(rename_all = "camelCase")]
pub struct UsageView {
    /// When it was read (RFC 3339).
    #[schema(format = DateTime)]
    pub at: String,
    /// CPU time used since the sandbox started, in seconds.
    pub cpu_seconds: f64,
    /// CPU use over the last interval in percent of one CPU (up to `vcpu` × 100).
    pub cpu_percent: f64,
    /// Length of that interval: since this sandbox's usage was last read (by anyone),
    /// or 500 ms for a first reading.
    pub interval_ms: u64,
    pub vcpu: u32,
    pub memory_bytes: u64,
    /// Highest memory use since it started.
    pub memory_peak_bytes: u64,
    pub memory_limit_bytes: u64,
    pub pids: u64,
    pub pids_limit: u64,
    /// Bytes used on its writable layer.
    pub disk_used_bytes: u64,
    /// Size limit of its writable layer; absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_limit_bytes: Option<u64>,
    /// Bytes received over its network interfaces (loopback not counted).
    pub network_rx_bytes: u64,
    /// Bytes sent over its network interfaces (loopback not counted).
    pub network_tx_bytes: u64,
}

impl From<&SandboxUsage> for UsageView {
    fn from(u: &SandboxUsage) -> Self {
        UsageView {
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
        }
    }
}
