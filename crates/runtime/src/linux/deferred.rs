//! Background disk upkeep a one-shot process holds back until its command is done: one
//! pending job per kind, keyed by the path it works on.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// One kind of held-back upkeep (a spare disk's refill, the trash's emptying).
pub(super) struct Deferred {
    on: AtomicBool,
    pending: Mutex<Option<PathBuf>>,
}

impl Deferred {
    pub(super) const fn new() -> Deferred {
        Deferred {
            on: AtomicBool::new(false),
            pending: Mutex::new(None),
        }
    }

    /// From now on, [`Deferred::hold`] keeps the work instead of letting it start.
    pub(super) fn defer(&self) {
        self.on.store(true, Ordering::Release);
    }

    /// True (the work on `path` kept for [`Deferred::take`]) when deferring.
    pub(super) fn hold(&self, path: &Path) -> bool {
        if !self.on.load(Ordering::Acquire) {
            return false;
        }
        *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(path.to_path_buf());
        true
    }

    /// The path of the work held back, once.
    pub(super) fn take(&self) -> Option<PathBuf> {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}
