//! Room reserved on the data dir for snapshots being written: a capture reserves its
//! upper bound (bytes and inodes) before it writes (see [`crate::Engine`]'s snapshot
//! admission) and gives it back once its entries are on disk, where the free space
//! itself then counts them. Creates count what is reserved as promised; a release bumps
//! an epoch so that a create whose measure of the free space predates it measures
//! again. Each reservation also counts as a snapshot under way in its workspace, so
//! that the workspace's snapshot quota sees those not yet recorded; a pause to disk's
//! memory image is reserved the same way but is no snapshot.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Default)]
pub(crate) struct DiskReservations {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    reserved: u64,
    inodes: u64,
    epoch: u64,
    /// Snapshots under way by workspace.
    writing: HashMap<String, u64>,
}

/// Bytes and inodes reserved, and a snapshot of `ws` under way, until dropped.
#[derive(Debug)]
pub(crate) struct Reservation<'a> {
    of: &'a DiskReservations,
    bytes: u64,
    inodes: u64,
    /// The workspace whose snapshot is under way (`None`: a pause's memory image).
    ws: Option<String>,
}

impl DiskReservations {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes reserved now.
    pub(crate) fn reserved(&self) -> u64 {
        self.inner().reserved
    }

    /// Inodes reserved now.
    pub(crate) fn reserved_inodes(&self) -> u64 {
        self.inner().inodes
    }

    /// Snapshots of `ws` under way (reserved, not yet given back).
    pub(crate) fn writing(&self, ws: &str) -> u64 {
        self.inner().writing.get(ws).copied().unwrap_or(0)
    }

    /// Changes each time a reservation is given back (its bytes moved to the disk).
    pub(crate) fn epoch(&self) -> u64 {
        self.inner().epoch
    }

    /// Reserves `bytes` and `inodes` for a snapshot of `ws` (the caller checked they
    /// fit, under the engine's admission).
    pub(crate) fn reserve(&self, ws: &str, bytes: u64, inodes: u64) -> Reservation<'_> {
        let mut inner = self.inner();
        inner.reserved = inner.reserved.saturating_add(bytes);
        inner.inodes = inner.inodes.saturating_add(inodes);
        *inner.writing.entry(ws.to_owned()).or_default() += 1;
        Reservation {
            of: self,
            bytes,
            inodes,
            ws: Some(ws.to_owned()),
        }
    }

    /// Reserves `bytes` and `inodes` for a memory image written by a pause to disk (the
    /// caller checked they fit, under the engine's admission); no snapshot under way.
    pub(crate) fn reserve_image(&self, bytes: u64, inodes: u64) -> Reservation<'_> {
        let mut inner = self.inner();
        inner.reserved = inner.reserved.saturating_add(bytes);
        inner.inodes = inner.inodes.saturating_add(inodes);
        Reservation {
            of: self,
            bytes,
            inodes,
            ws: None,
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut inner = self.of.inner();
        inner.reserved = inner.reserved.saturating_sub(self.bytes);
        inner.inodes = inner.inodes.saturating_sub(self.inodes);
        inner.epoch = inner.epoch.wrapping_add(1);
        let Some(ws) = &self.ws else {
            return;
        };
        if let Some(n) = inner.writing.get_mut(ws) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inner.writing.remove(ws);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_add_up_and_their_release_moves_the_epoch() {
        let r = DiskReservations::default();
        let a = r.reserve("w", 10, 3);
        let b = r.reserve("w", 5, 4);
        let c = r.reserve("v", 0, 0);
        assert_eq!((r.reserved(), r.reserved_inodes(), r.epoch()), (15, 7, 0));
        assert_eq!((r.writing("w"), r.writing("v"), r.writing("x")), (2, 1, 0));
        drop(a);
        assert_eq!((r.reserved(), r.reserved_inodes(), r.epoch()), (5, 4, 1));
        drop(b);
        drop(c);
        assert_eq!((r.reserved(), r.reserved_inodes(), r.epoch()), (0, 0, 3));
        assert_eq!((r.writing("w"), r.writing("v")), (0, 0));
    }

    #[test]
    fn a_pause_image_reserves_room_but_is_no_snapshot_under_way() {
        let r = DiskReservations::default();
        let a = r.reserve_image(100, 16);
        assert_eq!(
            (r.reserved(), r.reserved_inodes(), r.writing("w")),
            (100, 16, 0)
        );
        drop(a);
        assert_eq!((r.reserved(), r.reserved_inodes(), r.epoch()), (0, 0, 1));
    }
}
