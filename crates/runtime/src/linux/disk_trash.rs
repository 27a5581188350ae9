//! Disk images of destroyed sandboxes, moved out of the way so that a short-lived process
//! (`sandboxd run`) does not wait for the host filesystem to free them (unlinking a
//! 10 GiB sparse image takes tens of milliseconds).
//!
//! Such a destroy renames the image into `<data dir>/disk-trash/` (same filesystem: a
//! rename is cheap). Every runtime empties that dir on a background thread when it opens
//! the data dir, so the next process (a run, or the server starting) deletes what earlier
//! ones left, killed ones included (a one-shot run does it, with its own image, once its
//! command is done: see [`defer_emptying`]). Every file there is garbage: a rename moves a whole
//! image atomically. A server's destroys delete at once: its space is back on return.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The trash dir of `data_dir`.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("disk-trash")
}

/// The trash dir for the sandbox whose state dir is `state_dir`
/// (`<data dir>/sandboxes/<name>`).
pub fn dir_of_state(state_dir: &Path) -> PathBuf {
    dir(state_dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(state_dir))
}

/// One emptying thread per process at a time; a request during it sets `AGAIN`.
static EMPTYING: AtomicBool = AtomicBool::new(false);
static AGAIN: AtomicBool = AtomicBool::new(false);

/// Moves `img` into `trash`; false when that fails (then the caller removes it itself).
pub fn discard(img: &Path, trash: &Path) -> bool {
    let _ = super::private_dir::ensure(trash);
    let to = trash.join(format!("{}.img", uuid::Uuid::new_v4()));
    std::fs::rename(img, to).is_ok()
}

/// Removes every file in `trash` now.
pub fn empty(trash: &Path) {
    let Ok(entries) = std::fs::read_dir(trash) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        // Another process emptying the same dir may have removed it first.
        if let Err(e) = std::fs::remove_file(entry.path()) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(file = %entry.path().display(), error = %e, "cannot remove a discarded disk image");
            }
        }
    }
}

/// Emptying held back by [`defer_emptying`] for [`empty_deferred`].
static DEFERRED: super::deferred::Deferred = super::deferred::Deferred::new();

/// Makes this process's emptying wait for [`empty_deferred`]: a one-shot run removes
/// earlier runs' images once its command is done, not while its start needs the CPUs.
pub fn defer_emptying() {
    DEFERRED.defer();
}

/// The emptying [`defer_emptying`] held back, done now on this thread.
pub fn empty_deferred() {
    if let Some(trash) = DEFERRED.take() {
        empty(&trash);
    }
}

/// Empties `trash` on a background thread (at once when the thread cannot start; later
/// after [`defer_emptying`]).
pub fn empty_in_background(trash: &Path) {
    if DEFERRED.hold(trash) {
        return;
    }
    AGAIN.store(true, Ordering::Release);
    if EMPTYING.swap(true, Ordering::AcqRel) {
        return;
    }
    let dir = trash.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("disk-trash".into())
        .spawn(move || loop {
            while AGAIN.swap(false, Ordering::AcqRel) {
                empty(&dir);
            }
            EMPTYING.store(false, Ordering::Release);
            // A discard between the last pass and the flag going down: take it too.
            if !AGAIN.load(Ordering::Acquire) || EMPTYING.swap(true, Ordering::AcqRel) {
                break;
            }
        });
    if spawned.is_err() {
        EMPTYING.store(false, Ordering::Release);
        empty(trash);
    }
}

/// Waits until this process's emptying thread, if any, is done (a short-lived process
/// calls this before it exits, so that the emptying it started is not cut short).
pub fn wait_idle() {
    while EMPTYING.load(Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_discarded_image_leaves_its_dir_and_is_removed_by_emptying() {
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("layer.img");
        std::fs::write(&img, b"image").expect("img");
        let trash = super::dir(dir.path());
        assert!(discard(&img, &trash));
        assert!(!img.exists());
        assert_eq!(std::fs::read_dir(&trash).expect("trash").count(), 1);
        empty(&trash);
        assert_eq!(std::fs::read_dir(&trash).expect("trash").count(), 0);
    }
}
