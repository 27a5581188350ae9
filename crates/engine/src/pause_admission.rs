//! Disk admission of a pause to disk: before `checkpoint` writes the sandbox's memory
//! image into the data dir, the sandbox's memory limit (the image's upper bound) and a
//! few inodes are reserved against the data dir's room less what the active sandboxes
//! may still write into their layers and what other writers reserved, exactly as a
//! memory snapshot is admitted. The reservation is held until the image is written (or
//! the checkpoint failed); from then on the image's own blocks count in the free space
//! every later admission measures, until a resume or the sandbox's end removes it.
//! A pause that does not fit is told so, and pauses in memory instead (the auto-pause
//! sweep leaves such a sandbox running).

use crate::disk_reservations::Reservation;
use crate::engine::Engine;
use crate::error::EngineError;

/// Inodes a memory image takes (a few files in one dir).
const IMAGE_INODES: u64 = 16;

impl Engine {
    /// Reserves room for a memory image of up to `memory_bytes`; `CapacityExhausted`
    /// (with a retry hint) when the data dir cannot hold it beside what its sandboxes
    /// were promised. Nothing is reserved on a backend that measures no room.
    pub(crate) async fn reserve_memory_image(
        &self,
        memory_bytes: u64,
    ) -> Result<Reservation<'_>, EngineError> {
        let _admission = self.admission.lock().await;
        let Some(space) = self.disk_space().await? else {
            return Ok(self.disk_reservations.reserve_image(0, 0));
        };
        let active = self
            .store
            .sandboxes_in_status(&crate::state::ACTIVE_STATUSES)?;
        crate::disk_admission::admit_snapshot(
            space,
            self.limits.disk_policy,
            self.committed_mb(&active),
            self.disk_reservations.reserved(),
            memory_bytes,
        )?;
        crate::disk_admission::admit_snapshot_inodes(
            space,
            active.len() as u64,
            self.disk_reservations.reserved_inodes(),
            IMAGE_INODES,
        )?;
        Ok(self
            .disk_reservations
            .reserve_image(memory_bytes, IMAGE_INODES))
    }
}
