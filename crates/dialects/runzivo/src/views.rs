//! How a sandbox is rendered: its Runzivo ID, tenant, lowercase status and times.

use sandboxd_dialect_common::rfc3339_nanos;
use sandboxd_engine::{EndReason, Sandbox, SandboxStatus};
use serde::Serialize;

/// A sandbox as this dialect shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Sandbox)]
pub struct SandboxView {
    /// `sbx_` followed by 24 lowercase hexadecimal characters.
    #[schema(pattern = "^sbx_[0-9a-f]{24}$")]
    pub id: String,
    pub tenant_id: String,
    /// pending, starting, running, pausing, paused, resuming, stopping, stopped,
    /// expired, deleted or failed.
    #[schema(value_type = crate::openapi::Status)]
    pub status: &'static str,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub ended_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// Size of its writable layer in MiB (0: no limit); absent when not recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u32>,
    /// Extension: its isolation tier, `container` or `gvisor`.
    #[schema(pattern = "^(container|gvisor)$")]
    pub isolation: &'static str,
}

/// The dialect's status name of a sandbox.
pub fn status(sb: &Sandbox) -> &'static str {
    status_word(sb.status, sb.end_reason)
}

/// The Runzivo word for an engine state (and, once ended, why it ended).
pub fn status_word(status: SandboxStatus, end_reason: Option<EndReason>) -> &'static str {
    match status {
        SandboxStatus::Pending => "pending",
        SandboxStatus::Starting => "starting",
        SandboxStatus::Running => "running",
        SandboxStatus::Pausing => "pausing",
        SandboxStatus::Paused => "paused",
        SandboxStatus::Resuming => "resuming",
        SandboxStatus::Terminating => "stopping",
        SandboxStatus::Failed => "failed",
        SandboxStatus::Terminated => match end_reason {
            Some(EndReason::Destroyed) => "deleted",
            Some(EndReason::Timeout) => "expired",
            _ => "stopped",
        },
    }
}

impl SandboxView {
    /// `None` for a sandbox without a Runzivo ID (made through another dialect).
    pub fn of(sb: &Sandbox, tenant_id: &str) -> Option<Self> {
        let id = sb.alias(crate::ids::DIALECT)?.to_owned();
        Some(Self {
            id,
            tenant_id: tenant_id.to_owned(),
            status: status(sb),
            created_at: rfc3339_nanos(sb.created_at),
            started_at: sb.started_at.map(rfc3339_nanos),
            ended_at: sb.ended_at.map(rfc3339_nanos),
            expires_at: sb.expires_at.map(rfc3339_nanos),
            disk_mb: sb.disk_mb,
            isolation: sb.isolation.as_str(),
        })
    }
}
