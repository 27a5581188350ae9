//! Disk admission of snapshots: before a capture writes, its upper bound (what the
//! sandbox's writable layer occupies now, in bytes and in entries, plus its memory
//! limit for a memory image) is reserved against the data dir's room less what the
//! active sandboxes may still write into their layers, and against its free inodes less
//! a reserve and what active sandboxes may still need; a snapshot that does not fit is
//! refused as a temporary shortage. The workspace's snapshot quota (recorded snapshots
//! and those under way) is checked under the same lock. The reservation is given back
//! once the snapshot is on disk (its bytes and inodes then count in the free space
//! every later admission measures) or has failed.

use crate::disk_reservations::Reservation;
use crate::engine::{runtime_error, Engine};
use crate::error::{EngineError, ErrorCode};
use crate::model::WorkspaceId;
use sandboxd_runtime::{CaptureBound, SandboxHandle};

impl Engine {
    /// Reserves room for a snapshot of `handle` (in `ws`) that also keeps
    /// `memory_bytes` of memory image; nothing is reserved when the backend keeps
    /// nothing admission accounts, but the snapshot still counts as under way in the
    /// workspace.
    pub(crate) async fn reserve_snapshot(
        &self,
        ws: &WorkspaceId,
        handle: &SandboxHandle,
        memory_bytes: u64,
    ) -> Result<Reservation<'_>, EngineError> {
        let bound = self
            .measure_snapshot(handle, "snapshot: layer measured")
            .await?;
        // Tests hold a snapshot here, past its measure.
        self.blocking(|_| sandboxd_runtime::faults::hit("snapshot.measured"))
            .await?;
        self.admit_snapshot(ws, bound, memory_bytes).await
    }

    /// The most a capture of `handle`'s layer would store now (logged as `what`).
    pub(crate) async fn measure_snapshot(
        &self,
        handle: &SandboxHandle,
        what: &'static str,
    ) -> Result<Option<CaptureBound>, EngineError> {
        let h = handle.clone();
        let bound = self
            .blocking(move |rt| rt.snapshot_bound(&h))
            .await?
            .map_err(|e| runtime_error("cannot measure the sandbox's layer", e))?;
        if let Some(b) = bound {
            tracing::info!(sandbox = %handle.id, bytes = b.bytes, entries = b.entries, "{what}");
        }
        Ok(bound)
    }

    /// Reserves `bound` (measured: see [`Engine::measure_snapshot`]) and `memory_bytes`
    /// for a snapshot of `ws`, under admission, its quota checked there too.
    pub(crate) async fn admit_snapshot(
        &self,
        ws: &WorkspaceId,
        bound: Option<CaptureBound>,
        memory_bytes: u64,
    ) -> Result<Reservation<'_>, EngineError> {
        // Tests hold a snapshot here, under its sandbox's lock, about to wait for
        // admission (no hop in production).
        if cfg!(feature = "failpoints") {
            self.blocking(|_| sandboxd_runtime::faults::hit("snapshot.admission"))
                .await?;
        }
        // Under admission: no create is admitted, and no other snapshot reserves,
        // between this measure and the reservation.
        let _admission = self.admission.lock().await;
        self.check_snapshot_quota(ws)?;
        let Some(bound) = bound else {
            return Ok(self.disk_reservations.reserve(ws, 0, 0));
        };
        let want = bound.bytes.saturating_add(memory_bytes);
        // A memory image is a few files.
        let inodes = bound
            .entries
            .saturating_add(u64::from(memory_bytes > 0) * 16);
        match self.admit_room(want, inodes).await? {
            true => Ok(self.disk_reservations.reserve(ws, want, inodes)),
            false => Ok(self.disk_reservations.reserve(ws, 0, 0)),
        }
    }

    /// Reserves what a layer grew by from `before` to `now` (the snapshot already counts
    /// as under way, with `before` reserved), under admission; nothing (and no wait for
    /// admission) when it did not grow.
    pub(crate) async fn admit_growth(
        &self,
        before: Option<CaptureBound>,
        now: Option<CaptureBound>,
    ) -> Result<Option<Reservation<'_>>, EngineError> {
        let (Some(before), Some(now)) = (before, now) else {
            return Ok(None);
        };
        let bytes = now.bytes.saturating_sub(before.bytes);
        let inodes = now.entries.saturating_sub(before.entries);
        if bytes == 0 && inodes == 0 {
            return Ok(None);
        }
        let _admission = self.admission.lock().await;
        match self.admit_room(bytes, inodes).await? {
            true => Ok(Some(self.disk_reservations.reserve_image(bytes, inodes))),
            false => Ok(None),
        }
    }

    /// Whether `bytes` and `inodes` more fit the data dir beside what active sandboxes
    /// may still write and what is reserved (an error when not); `false` when the
    /// backend measures no disk (nothing to reserve). Called under admission.
    async fn admit_room(&self, bytes: u64, inodes: u64) -> Result<bool, EngineError> {
        let Some(space) = self.disk_space().await? else {
            return Ok(false);
        };
        let active = self
            .store
            .sandboxes_in_status(&crate::state::ACTIVE_STATUSES)?;
        crate::disk_admission::admit_snapshot(
            space,
            self.limits.disk_policy,
            self.committed_mb(&active),
            self.disk_reservations.reserved(),
            bytes,
        )?;
        crate::disk_admission::admit_snapshot_inodes(
            space,
            active.len() as u64,
            self.disk_reservations.reserved_inodes(),
            inodes,
        )?;
        Ok(true)
    }

    /// `QuotaExceeded` when the workspace holds as many snapshots (recorded, or being
    /// taken) as its quota allows.
    pub(crate) fn check_snapshot_quota(&self, ws: &WorkspaceId) -> Result<(), EngineError> {
        let max = self.workspace_quota(ws)?.max_snapshots;
        let recorded = self
            .store
            .list_snapshots(ws, None, max.saturating_add(1), None)?;
        let held = (recorded.len() as u64).saturating_add(self.disk_reservations.writing(ws));
        if held < u64::from(max) {
            return Ok(());
        }
        Err(EngineError::new(
            ErrorCode::QuotaExceeded,
            format!(
                "the workspace quota allows {max} snapshots; delete snapshots it no longer \
                 needs"
            ),
        ))
    }
}
