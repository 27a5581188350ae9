//! Snapshots: capture a sandbox's writable layer (and, on a backend that keeps memory
//! images, its memory with it: a gVisor sandbox's processes, from which sandboxes start
//! running them, a fork), list, get, delete.

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
    /// Captures a RUNNING or PAUSED sandbox's filesystem as a snapshot, with its memory
    /// where the backend can keep it (a gVisor sandbox's: taken frozen,
    /// consistent with the filesystem); the sandbox goes on as it was.
    pub async fn snapshot(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        name: Option<String>,
    ) -> Result<Snapshot, EngineError> {
        self.snapshot_with(ws, id, name, true).await
    }

    /// [`Engine::snapshot`], keeping the memory only when `memory` (and the backend can).
    ///
    /// The snapshot runs in a task the engine owns, not in the caller's future (as a
    /// template build does): a caller that goes away (an HTTP client that disconnects)
    /// leaves it to finish. Its disk reservation is held until the capture ends, and
    /// the snapshot is recorded (the client finds it in the list), so a layer is never
    /// left behind with no record naming it nor admission bypassed by disconnecting.
    pub(crate) async fn snapshot_with(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        name: Option<String>,
        memory: bool,
    ) -> Result<Snapshot, EngineError> {
        let Some(me) = self.me.upgrade() else {
            return Err(EngineError::new(
                ErrorCode::Unavailable,
                "the engine is shutting down",
            ));
        };
        let ws = ws.clone();
        let task = crate::request::spawn_for_request(async move {
            let taken = me.snapshot_steps(&ws, id, name, memory).await;
            me.metrics
                .operation(crate::metrics::Operation::Snapshot, &taken);
            me.audit(&ws, "sandbox.snapshot", Some(id.to_string()), &taken);
            taken
        });
        task.await.map_err(|e| {
            EngineError::with_source(ErrorCode::Internal, "the snapshot task failed", e)
        })?
    }

    async fn snapshot_steps(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        name: Option<String>,
        memory: bool,
    ) -> Result<Snapshot, EngineError> {
        if let Some(name) = &name {
            validate::snapshot_name(name)?;
        }
        let memory = memory
            && self
                .load(ws, id)?
                .handle
                .is_some_and(|h| self.runtime.can_snapshot_memory(&h));
        if memory {
            return self.memory_snapshot_steps(ws, id, name).await;
        }
        let (_guard, e) = self.shared(ws, id).await?;
        if !matches!(e.sb.status, SandboxStatus::Running | SandboxStatus::Paused) {
            return Err(wrong_state(&e.sb, "RUNNING or PAUSED"));
        }
        let Some(handle) = e.handle.clone() else {
            return Err(wrong_state(&e.sb, "started"));
        };
        self.filesystem_snapshot(&e, handle, name).await
    }

    /// A filesystem-only snapshot of `e` (its writable layer captured, the sandbox
    /// frozen meanwhile), under the caller's lock of it.
    async fn filesystem_snapshot(
        &self,
        e: &crate::convert::Entry,
        handle: sandboxd_runtime::SandboxHandle,
        name: Option<String>,
    ) -> Result<Snapshot, EngineError> {
        // Room is reserved on a measure of the sandbox as it runs, before the freeze:
        // the wait for admission (a create or another snapshot holding it) never keeps
        // the sandbox frozen.
        let estimate = self
            .measure_snapshot(&handle, "snapshot: layer estimated")
            .await?;
        let room = self.admit_snapshot(&e.sb.workspace, estimate, 0).await?;
        // Frozen before it is measured again, until the copy is done: what the capture
        // stores is what it reserved (a paused sandbox is frozen already).
        let frozen = match e.sb.status {
            SandboxStatus::Running => {
                Some(self.capture_freezes.hold(&self.runtime, &handle).await?)
            }
            _ => None,
        };
        let taken = self.frozen_snapshot(e, handle, name, estimate).await;
        drop(room);
        // Thawed before the answer (an error path's drop thaws on a task of its own).
        if let Some(frozen) = frozen {
            frozen.release().await;
        }
        taken
    }

    /// [`Engine::filesystem_snapshot`]'s work once its sandbox is frozen (or paused),
    /// with room reserved for `estimate`: measured again, frozen, and what it grew by
    /// reserved too (only then is admission waited for frozen).
    async fn frozen_snapshot(
        &self,
        e: &crate::convert::Entry,
        handle: sandboxd_runtime::SandboxHandle,
        name: Option<String>,
        estimate: Option<sandboxd_runtime::CaptureBound>,
    ) -> Result<Snapshot, EngineError> {
        let id = e.sb.id;
        let limit = self.limits.deadlines.snapshot;
        let bound = self
            .measure_snapshot(&handle, "snapshot: layer measured")
            .await?;
        // Tests hold a snapshot here, past its measure (its sandbox frozen).
        self.blocking(|_| sandboxd_runtime::faults::hit("snapshot.measured"))
            .await?;
        let _grown = self.admit_growth(estimate, bound).await?;
        // Past the deadline the copy and digest stop; a layer committed all the same
        // goes unless a record uses it.
        let cancel = sandboxd_runtime::Cancel::new();
        let stop = cancel.clone();
        let store = self.store.clone();
        let layer = self
            .bounded(
                limit,
                move |rt| rt.capture_layer_until(&handle, &cancel),
                move |rt, layer| {
                    if let Ok(layer) = layer {
                        drop_unrecorded_layer(store.as_ref(), rt, &layer.digest);
                    }
                },
            )
            .await?;
        let Some(layer) = layer else {
            stop.cancel();
            return Err(crate::lifecycle::deadline::overdue(
                &format!("the snapshot of sandbox {id}"),
                limit,
            ));
        };
        let layer =
            layer.map_err(|err| runtime_error(&format!("cannot snapshot sandbox {id}"), err))?;
        let snap = new_snapshot(e, name, layer, None);
        self.record_snapshot(snap).await
    }

    /// A snapshot with memory: the sandbox is checkpointed (its processes stop, its
    /// memory and filesystem are taken together) and restored, under the exclusive
    /// lock since its host processes change. Filesystem-only instead (`memory: false`)
    /// when the checkpoint would cut what is open to the sandbox (an operation, a
    /// streamed command, a followed log or output, a terminal, a download: the agent
    /// closes its connections for it), or when the sandbox cannot be checkpointed (a
    /// process holds a host socket); never refused for either.
    async fn memory_snapshot_steps(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        name: Option<String>,
    ) -> Result<Snapshot, EngineError> {
        let (_guard, mut e) = self.exclusive(ws, id).await?;
        if !matches!(e.sb.status, SandboxStatus::Running | SandboxStatus::Paused) {
            return Err(wrong_state(&e.sb, "RUNNING or PAUSED"));
        }
        let Some(handle) = e.handle.clone() else {
            return Err(wrong_state(&e.sb, "started"));
        };
        if self.activity.idle_since(id).is_none() || self.sessions.running(id) {
            tracing::info!(sandbox = %id, "snapshot: in use, filesystem only (open streams stay)");
            return self.filesystem_snapshot(&e, handle, name).await;
        }
        // Until its record is stored: the start-up sweep leaves the image alone.
        let _writing = crate::memory_images::writing(&self.data_dir)
            .await
            .map_err(|err| {
                EngineError::with_source(
                    ErrorCode::Internal,
                    "cannot lock the memory snapshots",
                    err,
                )
            })?;
        let snapshot_id = Uuid::new_v4();
        let limit = self.limits.deadlines.snapshot;
        let memory_bytes = u64::from(e.sb.resources.memory_mb) << 20;
        let room = self
            .reserve_snapshot(&e.sb.workspace, &handle, memory_bytes)
            .await?;
        let store = self.store.clone();
        let old = handle.clone();
        let Some((taken, now)) = self
            .bounded(
                limit,
                move |rt| rt.snapshot_memory(&handle, snapshot_id),
                // Done past the deadline: the sandbox is FAILED (destroyed) already;
                // what was taken goes.
                move |rt, (taken, now)| {
                    if let Ok(m) = taken {
                        let _ = rt.delete_memory_snapshot(&m.image);
                        drop_unrecorded_layer(store.as_ref(), rt, &m.layer.digest);
                    }
                    let _ = rt.destroy(&now);
                },
            )
            .await?
        else {
            let err = crate::lifecycle::deadline::overdue(
                &format!("the snapshot of sandbox {id}"),
                limit,
            );
            self.fail_sandbox(&mut e, &err).await?;
            return Err(err);
        };
        let unchanged = now == old;
        if !unchanged {
            self.adopt_snapshotted(&mut e, now).await?;
        }
        let taken = match taken {
            // It goes on as it was, untouched: its filesystem alone, as on containers.
            Err(sandboxd_runtime::RuntimeError::CannotCheckpoint(why)) if unchanged => {
                tracing::info!(sandbox = %id, reason = %why, "snapshot: no memory, filesystem only");
                drop(room); // the filesystem snapshot reserves its own
                return self.filesystem_snapshot(&e, old, name).await;
            }
            taken => {
                taken.map_err(|err| runtime_error(&format!("cannot snapshot sandbox {id}"), err))?
            }
        };
        let mut snap = new_snapshot(&e, name, taken.layer, Some(taken.image));
        snap.id = snapshot_id;
        self.record_snapshot(snap).await
    }

    /// Takes the handle a sandbox has after its memory was snapshotted: a new sentry to
    /// watch, or, when it could not be brought back, on disk (PAUSED; a resume
    /// restores it).
    async fn adopt_snapshotted(
        &self,
        e: &mut crate::convert::Entry,
        now: sandboxd_runtime::SandboxHandle,
    ) -> Result<(), EngineError> {
        let on_disk = self.runtime.is_checkpointed(&now);
        if !on_disk {
            self.watch_agent(&e.sb.workspace, e.sb.id, &now);
        }
        e.handle = Some(now);
        if on_disk && e.sb.status == SandboxStatus::Running {
            self.transition(e, SandboxStatus::Pausing)?;
            return self.transition(e, SandboxStatus::Paused);
        }
        self.save(e)
    }

    /// Stores `snap`; when that fails, what it alone holds (its layer, its memory
    /// image) goes.
    async fn record_snapshot(&self, snap: Snapshot) -> Result<Snapshot, EngineError> {
        let stored = crate::faults::store_write("store.insert_snapshot")
            .and_then(|()| Ok(self.store.insert_snapshot(&snapshot_to_record(&snap))?));
        if let Err(err) = stored {
            // No record names the captured layer: it goes unless something else uses it.
            let _admission = self.admission.lock().await;
            self.delete_memory_image(&snap).await;
            self.delete_unused_layers(std::slice::from_ref(&snap.digest))
                .await?;
            return Err(err);
        }
        Ok(snap)
    }

    /// Removes a snapshot's memory image, if it has one (logged when that fails).
    async fn delete_memory_image(&self, snap: &Snapshot) {
        let Some(image) = snap.memory_image.clone() else {
            return;
        };
        let removed = self
            .blocking(move |rt| rt.delete_memory_snapshot(&image))
            .await;
        if let Err(err) = removed
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
        {
            tracing::warn!(snapshot = %snap.id, error = %err, "cannot delete a memory snapshot's image");
        }
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
        let (snap, layers) = {
            let _admission = self.admission.lock().await; // no sandbox starts on it meanwhile
            let snap = self.get_snapshot(ws, id).await?;
            self.store.delete_snapshot(id)?;
            // Creates from it past admission have their records, which keep its layers.
            let layers = self.delete_unused_layers(&snap.layers).await;
            (snap, layers)
        };
        // Its image goes whatever became of its layers (the record naming it is gone),
        // by a task of its own: a client gone meanwhile does not leave it behind.
        if let Some(removal) = self.remove_memory_image_after_restores(&snap) {
            if let Err(err) = removal.await {
                tracing::warn!(snapshot = %id, error = %err, "a memory image's removal failed");
            }
        }
        layers?;
        Ok(snap)
    }

    /// Spawns the removal of a deleted snapshot's memory image (if it has one). A
    /// create restoring from it reads its image until the restore is done: the image
    /// goes after (no new one can start: the record is gone). Sandboxes started from
    /// it run on their own (their memory is theirs).
    fn remove_memory_image_after_restores(
        &self,
        snap: &Snapshot,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let image = snap.memory_image.clone()?;
        let (id, pins, runtime) = (snap.id, self.memory_pins.clone(), self.runtime.clone());
        Some(tokio::spawn(async move {
            if pins.is_pinned(id) {
                sandboxd_runtime::faults::hit("snapshot_delete.waits");
                tracing::info!(snapshot = %id, "delete: waiting for the restores from it");
            }
            pins.unpinned(id).await;
            let removed =
                tokio::task::spawn_blocking(move || runtime.delete_memory_snapshot(&image)).await;
            if let Err(err) = removed
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
            {
                tracing::warn!(snapshot = %id, error = %err, "cannot delete a memory snapshot's image");
            }
        }))
    }

    /// Removes the memory images no snapshot record names (a crash between taking one
    /// and storing its record), unless one is being taken now (by any process on the
    /// data dir); at start-up, after re-adoption.
    pub(crate) fn sweep_memory_images(&self) {
        let lock = match crate::memory_images::sweeping(&self.data_dir) {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                tracing::info!("a memory snapshot is being taken: images not swept");
                return;
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot lock the memory snapshots: images not swept");
                return;
            }
        };
        let keep = match self.store.snapshot_memory_images() {
            Ok(paths) => crate::memory_images::recorded(paths),
            Err(err) => {
                tracing::warn!(error = %err, "cannot list the memory snapshots: images not swept");
                return;
            }
        };
        for path in self.runtime.sweep_memory_snapshots(&keep) {
            tracing::info!(path = %path.display(), "removed a memory snapshot image no record names");
        }
        drop(lock);
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

/// Deletes a layer a snapshot committed after its caller gave up on it, unless a
/// snapshot record or an active sandbox uses it (the same content captured again).
fn drop_unrecorded_layer(
    store: &dyn sandboxd_store::Store,
    rt: &dyn sandboxd_runtime::Runtime,
    digest: &str,
) {
    let active = store.sandboxes_in_status(&ACTIVE_STATUSES);
    let in_use = match (store.snapshots_using_layer(digest), active) {
        (Ok(n), Ok(active)) => {
            n > 0
                || active
                    .iter()
                    .any(|s| s.extra_layers.iter().any(|l| l == digest))
        }
        _ => true, // unknown: kept (a prune finds it later)
    };
    if in_use {
        return;
    }
    match rt.delete_layer(digest) {
        Ok(()) => {
            tracing::info!(layer = %digest, "removed a layer captured past its snapshot's deadline")
        }
        Err(err) => {
            tracing::warn!(layer = %digest, error = %err, "cannot remove a layer captured past its deadline")
        }
    }
}

/// The snapshot record of `e` with its new `layer` on top of the ones it runs on.
fn new_snapshot(
    e: &crate::convert::Entry,
    name: Option<String>,
    layer: sandboxd_runtime::Layer,
    memory_image: Option<std::path::PathBuf>,
) -> Snapshot {
    let mut layers = e.extra_layers.clone();
    layers.push(layer.digest.clone());
    Snapshot {
        id: Uuid::new_v4(),
        workspace: e.sb.workspace.clone(),
        name,
        source_sandbox_id: e.sb.id,
        image: e.sb.image.clone(),
        layers,
        digest: layer.digest,
        size_bytes: layer.size_bytes,
        resources: e.sb.resources,
        created_at: OffsetDateTime::now_utc(),
        expires_at: None,
        disk_mb: e.sb.disk_mb,
        memory_image,
    }
}
