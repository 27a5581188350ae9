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
use sandboxd_runtime::SandboxHandle;

impl Engine {
    /// Reserves room for a snapshot of `handle` (in `ws`) that also keeps
    /// `memory_bytes` of memory image; nothing is reserved when the backend keeps
    /// nothing admission accounts, but the snapshot still counts as under way in the
    /// workspace. A filesystem snapshot calls this with its sandbox frozen, so what it
    /// measures is what the capture copies.
    pub(crate) async fn reserve_snapshot(
        &self,
        ws: &WorkspaceId,
        handle: &SandboxHandle,
        memory_bytes: u64,
    ) -> Result<Reservation<'_>, EngineError> {
        let h = handle.clone();
        let bound = self
            .blocking(move |rt| rt.snapshot_bound(&h))
            .await?
            .map_err(|e| runtime_error("cannot measure the sandbox's layer", e))?;
        if let Some(b) = bound {
            tracing::info!(sandbox = %handle.id, bytes = b.bytes, entries = b.entries, "snapshot: layer measured");
        }
        // Tests hold a snapshot here, past its measure, to show nothing grows meanwhile.
        self.blocking(|_| sandboxd_runtime::faults::hit("snapshot.measured"))
            .await?;
        // Under admission: no create is admitted, and no other snapshot reserves,
        // between this measure and the reservation.
        let _admission = self.admission.lock().await;
        self.check_snapshot_quota(ws)?;
        let Some(bound) = bound else {
            return Ok(self.disk_reservations.reserve(ws, 0, 0));
        };
        let space = self
            .blocking(|rt| rt.disk_space())
            .await?
            .map_err(|e| runtime_error("cannot measure the disk", e))?;
        let Some(space) = space else {
            return Ok(self.disk_reservations.reserve(ws, 0, 0));
        };
        let want = bound.bytes.saturating_add(memory_bytes);
        // A memory image is a few files.
        let inodes = bound
            .entries
            .saturating_add(u64::from(memory_bytes > 0) * 16);
        let active = self
            .store
            .sandboxes_in_status(&crate::state::ACTIVE_STATUSES)?;
        crate::disk_admission::admit_snapshot(
            space,
            self.limits.disk_policy,
            self.committed_mb(&active),
            self.disk_reservations.reserved(),
            want,
        )?;
        crate::disk_admission::admit_snapshot_inodes(
            space,
            active.len() as u64,
            self.disk_reservations.reserved_inodes(),
            inodes,
        )?;
        Ok(self.disk_reservations.reserve(ws, want, inodes))
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
