//! Conversions between engine values and the store's plain records.

use crate::error::{EngineError, ErrorCode};
use crate::model::{EndReason, Resources, Sandbox, Snapshot};
use crate::state::SandboxStatus;
use sandboxd_runtime::SandboxHandle;
use sandboxd_store::{SandboxRecord, SnapshotRecord};

/// Width of one sandbox's host id range.
const ID_RANGE: u32 = 65536;

/// A sandbox with what only the engine sees: the backend handle and its snapshot layers.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub sb: Sandbox,
    pub handle: Option<SandboxHandle>,
    pub extra_layers: Vec<String>,
    /// The network its create asked for; `None` on records from before it was kept.
    pub network: Option<crate::egress::RequestedNetwork>,
}

fn corrupt(what: String) -> EngineError {
    EngineError::new(
        ErrorCode::Internal,
        format!("corrupt sandbox record: {what}"),
    )
}

fn end_reason_str(r: EndReason) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

pub(crate) fn end_reason_parse(s: &str) -> Option<EndReason> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).ok()
}

pub(crate) fn entry_to_record(e: &Entry) -> SandboxRecord {
    let sb = &e.sb;
    SandboxRecord {
        id: sb.id,
        workspace: sb.workspace.clone(),
        name: sb.name.clone(),
        status: sb.status.as_str().to_owned(),
        image: sb.image.clone(),
        vcpu: sb.resources.vcpu,
        memory_mb: sb.resources.memory_mb,
        created_at: sb.created_at,
        started_at: sb.started_at,
        ended_at: sb.ended_at,
        expires_at: sb.expires_at,
        auto_pause: sb.auto_pause,
        auto_paused_at: sb.auto_paused_at,
        end_reason: sb.end_reason.map(end_reason_str),
        error: sb.error.clone(),
        snapshot_id: sb.snapshot_id,
        environment: sb.environment.clone(),
        secrets: sb.secrets.clone(),
        metadata: sb.metadata.clone(),
        extra_layers: e.extra_layers.clone(),
        handle: e.handle.as_ref().and_then(|h| serde_json::to_value(h).ok()),
        id_slot: e.handle.as_ref().map(|h| h.host_id_base / ID_RANGE),
        disk_mb: sb.disk_mb,
        aliases: sb.aliases.clone(),
        attributes: sb.attributes.clone(),
        isolation: Some(sb.isolation.as_str().to_owned()),
        network: e
            .network
            .as_ref()
            .and_then(|n| serde_json::to_value(n).ok()),
    }
}

/// The entry a record holds; a record from before tiers were kept runs on `default`.
pub(crate) fn entry_from_record(
    r: SandboxRecord,
    default: sandboxd_runtime::Isolation,
) -> Result<Entry, EngineError> {
    let status =
        SandboxStatus::parse(&r.status).ok_or_else(|| corrupt(format!("status {:?}", r.status)))?;
    let end_reason = match &r.end_reason {
        Some(s) => Some(end_reason_parse(s).ok_or_else(|| corrupt(format!("end reason {s:?}")))?),
        None => None,
    };
    let isolation = match &r.isolation {
        Some(s) => s.parse().map_err(|_| corrupt(format!("isolation {s:?}")))?,
        None => default,
    };
    let handle = match r.handle {
        Some(v) => {
            let mut h: SandboxHandle =
                serde_json::from_value(v).map_err(|e| corrupt(format!("handle: {e}")))?;
            // The record's tier routes the handle (older handles do not carry it).
            h.isolation = isolation;
            Some(h)
        }
        None => None,
    };
    Ok(Entry {
        sb: Sandbox {
            id: r.id,
            workspace: r.workspace,
            name: r.name,
            status,
            image: r.image,
            resources: Resources {
                vcpu: r.vcpu,
                memory_mb: r.memory_mb,
            },
            created_at: r.created_at,
            started_at: r.started_at,
            ended_at: r.ended_at,
            expires_at: r.expires_at,
            auto_pause: r.auto_pause,
            auto_paused_at: r.auto_paused_at,
            end_reason,
            error: r.error,
            snapshot_id: r.snapshot_id,
            environment: r.environment,
            secrets: r.secrets,
            metadata: r.metadata,
            disk_mb: r.disk_mb,
            aliases: r.aliases,
            attributes: r.attributes,
            isolation,
        },
        handle,
        extra_layers: r.extra_layers,
        // One that does not read (written by a newer server) compares as unknown.
        network: r.network.and_then(|v| serde_json::from_value(v).ok()),
    })
}

pub(crate) fn snapshot_to_record(s: &Snapshot) -> SnapshotRecord {
    SnapshotRecord {
        id: s.id,
        workspace: s.workspace.clone(),
        name: s.name.clone(),
        source_sandbox_id: s.source_sandbox_id,
        image: s.image.clone(),
        layers: s.layers.clone(),
        digest: s.digest.clone(),
        size_bytes: s.size_bytes,
        vcpu: s.resources.vcpu,
        memory_mb: s.resources.memory_mb,
        created_at: s.created_at,
        expires_at: s.expires_at,
        disk_mb: s.disk_mb,
        memory_image: s.memory_image.as_ref().map(|p| p.display().to_string()),
    }
}

pub(crate) fn snapshot_from_record(r: SnapshotRecord) -> Snapshot {
    Snapshot {
        id: r.id,
        workspace: r.workspace,
        name: r.name,
        source_sandbox_id: r.source_sandbox_id,
        image: r.image,
        layers: r.layers,
        digest: r.digest,
        size_bytes: r.size_bytes,
        resources: Resources {
            vcpu: r.vcpu,
            memory_mb: r.memory_mb,
        },
        created_at: r.created_at,
        expires_at: r.expires_at,
        disk_mb: r.disk_mb,
        memory_image: r.memory_image.map(std::path::PathBuf::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(isolation: Option<&str>, handle: serde_json::Value) -> SandboxRecord {
        SandboxRecord {
            id: uuid::Uuid::new_v4(),
            workspace: "w".into(),
            name: None,
            status: "RUNNING".into(),
            image: "default".into(),
            vcpu: 1,
            memory_mb: 256,
            created_at: time::OffsetDateTime::UNIX_EPOCH,
            started_at: None,
            ended_at: None,
            expires_at: None,
            end_reason: None,
            error: None,
            snapshot_id: None,
            environment: Default::default(),
            secrets: Vec::new(),
            metadata: Default::default(),
            extra_layers: Vec::new(),
            handle: Some(handle),
            id_slot: None,
            disk_mb: None,
            aliases: Default::default(),
            attributes: Default::default(),
            auto_pause: false,
            auto_paused_at: None,
            isolation: isolation.map(str::to_owned),
            network: None,
        }
    }

    /// A handle stored before tiers were recorded (no `isolation` in its JSON).
    fn old_handle() -> serde_json::Value {
        serde_json::json!({"id": uuid::Uuid::nil(), "agent_pid": 1, "agent_start_ticks": 2,
            "agent_socket": "/s", "state_dir": "/d", "host_id_base": 0})
    }

    #[test]
    fn the_records_tier_routes_its_handle_and_old_rows_take_the_servers() {
        use sandboxd_runtime::Isolation::{Container, Gvisor};
        // A row from before tiers: the server's default, for the sandbox and its handle.
        let e = entry_from_record(record(None, old_handle()), Gvisor).expect("entry");
        assert_eq!(e.sb.isolation, Gvisor);
        assert_eq!(e.handle.map(|h| h.isolation), Some(Gvisor));
        // A recorded tier wins over the default and over what the handle says.
        let mut h = old_handle();
        h["isolation"] = serde_json::json!("container");
        let e = entry_from_record(record(Some("gvisor"), h), Container).expect("entry");
        assert_eq!(e.handle.map(|h| h.isolation), Some(Gvisor));
        // It is written back by name.
        let e = entry_from_record(record(None, old_handle()), Gvisor).expect("entry");
        assert_eq!(entry_to_record(&e).isolation.as_deref(), Some("gvisor"));
        let bad = entry_from_record(record(Some("vm"), old_handle()), Container);
        assert!(bad.is_err(), "an unknown stored tier is corrupt");
    }

    #[test]
    fn end_reasons_use_their_wire_names() {
        assert_eq!(end_reason_str(EndReason::StartFailed), "start_failed");
        assert_eq!(end_reason_parse("crashed"), Some(EndReason::Crashed));
        assert_eq!(end_reason_parse("nope"), None);
    }
}
