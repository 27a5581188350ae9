//! Counts of starts that took a warm init (hits) and of those that found none (misses).

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub(super) struct WarmCounts {
    hits: AtomicU64,
    misses: AtomicU64,
}

impl WarmCounts {
    /// Counts one start of a runtime that keeps warm inits.
    pub(super) fn count(&self, warm: bool) {
        let counter = if warm { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// (hits, misses) so far.
    pub(super) fn get(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}
