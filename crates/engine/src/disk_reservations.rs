//! Room reserved on the data dir for snapshots being written: a capture reserves its
//! upper bound before it writes (see [`crate::Engine`]'s snapshot admission) and gives
//! it back once its bytes are on disk, where the free space itself then counts them.
//! Creates count what is reserved as promised; a release bumps an epoch so that a
//! create whose measure of the free space predates it measures again.

use std::sync::Mutex;

#[derive(Debug, Default)]
pub(crate) struct DiskReservations {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    reserved: u64,
    epoch: u64,
}

/// Bytes reserved until dropped.
#[derive(Debug)]
pub(crate) struct Reservation<'a> {
    of: &'a DiskReservations,
    bytes: u64,
}

impl DiskReservations {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes reserved now.
    pub(crate) fn reserved(&self) -> u64 {
        self.inner().reserved
    }

    /// Changes each time a reservation is given back (its bytes moved to the disk).
    pub(crate) fn epoch(&self) -> u64 {
        self.inner().epoch
    }

    /// Reserves `bytes` (the caller checked they fit, under the engine's admission).
    pub(crate) fn reserve(&self, bytes: u64) -> Reservation<'_> {
        let mut inner = self.inner();
        inner.reserved = inner.reserved.saturating_add(bytes);
        Reservation { of: self, bytes }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut inner = self.of.inner();
        inner.reserved = inner.reserved.saturating_sub(self.bytes);
        inner.epoch = inner.epoch.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_add_up_and_their_release_moves_the_epoch() {
        let r = DiskReservations::default();
        let a = r.reserve(10);
        let b = r.reserve(5);
        assert_eq!((r.reserved(), r.epoch()), (15, 0));
        drop(a);
        assert_eq!((r.reserved(), r.epoch()), (5, 1));
        drop(b);
        assert_eq!((r.reserved(), r.epoch()), (0, 2));
    }
}
