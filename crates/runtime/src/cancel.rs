//! A flag a caller sets to stop a long blocking runtime step (a snapshot's copy and
//! digest) that it no longer waits for; the step checks it as it goes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Shared stop flag: clones see the same flag.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every holder to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// `Err(Interrupted)` once cancelled, for loops doing I/O.
    pub fn check(&self) -> std::io::Result<()> {
        match self.is_cancelled() {
            true => Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "cancelled: the caller stopped waiting",
            )),
            false => Ok(()),
        }
    }
}
