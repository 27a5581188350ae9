//! Memory snapshot images over their life: the pins of creates restoring from one (its
//! delete waits for them before removing the image), the lock held while one is taken
//! and recorded, and the start-up sweep of images that no snapshot record names (a
//! crash between taking one and recording it).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use uuid::Uuid;

/// The lock file, in the data dir: held shared by each snapshot being taken until its
/// record is stored, exclusive by the sweep.
const WRITING_LOCK: &str = "memory-snapshots.lock";

/// Creates restoring from each snapshot now.
#[derive(Debug, Default)]
pub(crate) struct Pins {
    counts: Mutex<HashMap<Uuid, usize>>,
    released: Notify,
}

/// One create restoring from a snapshot; released when dropped.
#[derive(Debug)]
pub(crate) struct Pin {
    pins: Arc<Pins>,
    snapshot: Uuid,
}

impl Pins {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<Uuid, usize>) -> T) -> T {
        f(&mut self.counts.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Holds `snapshot`'s image for a create until the pin is dropped.
    pub(crate) fn pin(self: &Arc<Self>, snapshot: Uuid) -> Pin {
        self.with(|m| *m.entry(snapshot).or_insert(0) += 1);
        Pin {
            pins: self.clone(),
            snapshot,
        }
    }

    pub(crate) fn is_pinned(&self, snapshot: Uuid) -> bool {
        self.with(|m| m.contains_key(&snapshot))
    }

    /// Returns once no create holds `snapshot`.
    pub(crate) async fn unpinned(&self, snapshot: Uuid) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before the check: a release in between still wakes it.
            released.as_mut().enable();
            if !self.is_pinned(snapshot) {
                return;
            }
            released.await;
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.pins.with(|m| {
            if let Some(n) = m.get_mut(&self.snapshot) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&self.snapshot);
                }
            }
        });
        self.pins.released.notify_waiters();
    }
}

fn open_lock(data_dir: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(data_dir.join(WRITING_LOCK))
}

/// Held while a memory snapshot is taken and recorded: the sweep leaves images alone
/// meanwhile (in this server or another process on the data dir).
pub(crate) async fn writing(data_dir: &Path) -> std::io::Result<File> {
    use rustix::fs::{flock, FlockOperation};
    let file = open_lock(data_dir)?;
    // The sweep holds it exclusive for a moment at start-up only: wait it out.
    loop {
        match flock(&file, FlockOperation::NonBlockingLockShared) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::WOULDBLOCK) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The lock of the sweep, or `None` while a memory snapshot is being written.
pub(crate) fn sweeping(data_dir: &Path) -> std::io::Result<Option<File>> {
    use rustix::fs::{flock, FlockOperation};
    let file = open_lock(data_dir)?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The image paths the records name, as the sweep compares them.
pub(crate) fn recorded(paths: Vec<String>) -> std::collections::HashSet<PathBuf> {
    paths.into_iter().map(PathBuf::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_delete_waits_for_every_pin_and_a_sweep_for_every_writer() {
        let pins = Arc::new(Pins::default());
        let snap = Uuid::new_v4();
        let (a, b) = (pins.pin(snap), pins.pin(snap));
        let waiter = tokio::spawn({
            let pins = pins.clone();
            async move { pins.unpinned(snap).await }
        });
        drop(a);
        assert!(pins.is_pinned(snap));
        drop(b);
        waiter.await.expect("the wait ends once both are dropped");
        assert!(!pins.is_pinned(snap));

        let dir = tempfile::tempdir().expect("temp dir");
        let writer = writing(dir.path()).await.expect("writer");
        assert!(sweeping(dir.path()).expect("lock").is_none());
        drop(writer);
        let sweep = sweeping(dir.path()).expect("lock");
        assert!(sweep.is_some());
    }
}
