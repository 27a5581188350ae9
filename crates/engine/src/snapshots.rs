//! Filesystem snapshots: capture a sandbox's writable layer, list, get, delete.

use crate::convert::{snapshot_from_record, snapshot_to_record};
use crate::cursor;
use crate::engine::{runtime_error, Engine};
use crate::error::{EngineError, ErrorCode};
use crate::lifecycle::wrong_state;
use crate::model::{Page, PageRequest, Snapshot, WorkspaceId};
use crate::state::{SandboxStatus, ACTIVE_STATUSES};
use crate::validate;
use time::OffsetDateTime;
use uuid::Uuid;

fn not_found(id: Uuid) -> EngineError {
    EngineError::new(
        ErrorCode::SnapshotNotFound,
        format!("snapshot {id} not found"),
    )
}

impl Engine {
    /// Captures a RUNNING or PAUSED sandbox's filesystem as a snapshot; the sandbox
    /// keeps running.
    pub async fn snapshot(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        name: Option<String>,
    ) -> Result<Snapshot, EngineError> {
        let taken = self.snapshot_steps(ws, id, name).await;
        self.metrics
            .operation(crate::metrics::Operation::Snapshot, &taken);
        self.audit(ws, "sandbox.snapshot", Some(id.to_string()), &taken);
        taken
    }

    async fn snapshot_steps(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        name: Option<String>,
    ) -> Result<Snapshot, EngineError> {
        if let Some(name) = &name {
            validate::snapshot_name(name)?;
        }
        let (_guard, e) = self.shared(ws, id).await?;
        if !matches!(e.sb.status, SandboxStatus::Running | SandboxStatus::Paused) {
            return Err(wrong_state(&e.sb, "RUNNING or PAUSED"));
        }
        let Some(handle) = e.handle.clone() else {
            return Err(wrong_state(&e.sb, "started"));
        };
        let limit = self.limits.deadlines.snapshot;
        let layer = self
            .bounded(limit, move |rt| rt.capture_layer(&handle), |_, _| {})
            .await?
            .ok_or_else(|| {
                crate::lifecycle::deadline::overdue(&format!("the snapshot of sandbox {id}"), limit)
            })?
            .map_err(|err| runtime_error(&format!("cannot snapshot sandbox {id}"), err))?;
        let mut layers = e.extra_layers.clone();
        layers.push(layer.digest.clone());
        let snap = Snapshot {
            id: Uuid::new_v4(),
            workspace: ws.clone(),
            name,
            source_sandbox_id: id,
            image: e.sb.image.clone(),
            layers,
            digest: layer.digest,
            size_bytes: layer.size_bytes,
            resources: e.sb.resources,
            created_at: OffsetDateTime::now_utc(),
            expires_at: None,
            disk_mb: e.sb.disk_mb,
        };
        let stored = crate::faults::store_write("store.insert_snapshot")
            .and_then(|()| Ok(self.store.insert_snapshot(&snapshot_to_record(&snap))?));
        if let Err(err) = stored {
            // No record names the captured layer: it goes unless something else uses it.
            let _admission = self.admission.lock().await;
            self.delete_unused_layers(std::slice::from_ref(&snap.digest))
                .await?;
            return Err(err);
        }
        Ok(snap)
    }

    /// The workspace's snapshots, newest first, optionally only those named `name`.
    pub async fn list_snapshots(
        &self,
        ws: &WorkspaceId,
        name: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<Snapshot>, EngineError> {
        let limit = cursor::page_size(page.limit);
        let rows = self
            .store
            .list_snapshots(ws, name, limit + 1, cursor::after(&page)?)?;
        let items = rows.into_iter().map(snapshot_from_record).collect();
        Ok(cursor::keyset_page(items, limit, |s: &Snapshot| {
            (s.created_at, s.id)
        }))
    }

    pub async fn get_snapshot(&self, ws: &WorkspaceId, id: Uuid) -> Result<Snapshot, EngineError> {
        match self.store.get_snapshot(id)? {
            Some(rec) if rec.workspace == *ws => Ok(snapshot_from_record(rec)),
            _ => Err(not_found(id)),
        }
    }

    /// Deletes the snapshot, and each of its layers that no other snapshot and no
    /// active sandbox still uses.
    pub async fn delete_snapshot(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
    ) -> Result<Snapshot, EngineError> {
        let deleted = self.delete_snapshot_steps(ws, id).await;
        self.audit(ws, "snapshot.delete", Some(id.to_string()), &deleted);
        deleted
    }

    async fn delete_snapshot_steps(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
    ) -> Result<Snapshot, EngineError> {
        let _admission = self.admission.lock().await; // no sandbox starts on it meanwhile
        let snap = self.get_snapshot(ws, id).await?;
        self.store.delete_snapshot(id)?;
        self.delete_unused_layers(&snap.layers).await?;
        Ok(snap)
    }

    /// Deletes each of `layers` that no snapshot and no active sandbox uses.
    async fn delete_unused_layers(&self, layers: &[String]) -> Result<(), EngineError> {
        let active = self.store.sandboxes_in_status(&ACTIVE_STATUSES)?;
        for digest in layers {
            let in_use = self.store.snapshots_using_layer(digest)? > 0
                || active.iter().any(|s| s.extra_layers.contains(digest));
            if in_use {
                continue;
            }
            let d = digest.clone();
            if let Err(err) = self.blocking(move |rt| rt.delete_layer(&d)).await? {
                tracing::warn!(layer = %digest, error = %err, "cannot delete unused layer");
            }
        }
        Ok(())
    }
}
