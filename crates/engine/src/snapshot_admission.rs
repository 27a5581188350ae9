//! Disk admission of snapshots: before a capture writes, its upper bound (what the
//! sandbox's writable layer occupies now, plus its memory limit for a memory image) is
//! reserved against the data dir's room less what the active sandboxes may still write
//! into their layers; a snapshot that does not fit is refused as a temporary shortage.
//! The reservation is given back once the snapshot is on disk (its bytes then count in
//! the free space every later admission measures) or has failed.

use crate::disk_reservations::Reservation;
use crate::engine::{runtime_error, Engine};
use crate::error::EngineError;
use sandboxd_runtime::SandboxHandle;

impl Engine {
    /// Reserves room for a snapshot of `handle` that also keeps `memory_bytes` of
    /// memory image; `None` when the backend keeps nothing admission accounts.
    pub(crate) async fn reserve_snapshot(
        &self,
        handle: &SandboxHandle,
        memory_bytes: u64,
    ) -> Result<Option<Reservation<'_>>, EngineError> {
        let h = handle.clone();
        let bound = self
            .blocking(move |rt| rt.snapshot_bound(&h))
            .await?
            .map_err(|e| runtime_error("cannot measure the sandbox's layer", e))?;
        let Some(bound) = bound else {
            return Ok(None);
        };
        let want = bound.saturating_add(memory_bytes);
        // Under admission: no create is admitted, and no other snapshot reserves,
        // between this measure and the reservation.
        let _admission = self.admission.lock().await;
        let space = self
            .blocking(|rt| rt.disk_space())
            .await?
            .map_err(|e| runtime_error("cannot measure the disk", e))?;
        let Some(space) = space else {
            return Ok(None);
        };
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
        Ok(Some(self.disk_reservations.reserve(want)))
    }
}
