//! Spare copies of the disk templates, made (and written back) in the background, so that
//! a start renames one into place instead of copying the template on its own critical path.
//!
//! Spares are plain files next to their template (`<mb>.img.spare-<uuid>`); a copy in
//! progress has a `.partial-` name and becomes a spare by rename only when complete, so
//! a process that dies mid-copy never leaves a broken spare behind.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// How many spares to keep per template.
const SPARES: usize = 2;
/// One refill thread per process at a time.
static REFILLING: AtomicBool = AtomicBool::new(false);
/// Refills held back by [`defer_refills`] for [`refill_deferred`].
static DEFERRED: super::deferred::Deferred = super::deferred::Deferred::new();

/// The files next to `template` whose names start with `prefix` (none for a path
/// without a dir or a file name).
fn named_beside(template: &Path, prefix: &str) -> Vec<PathBuf> {
    let (Some(dir), Some(_)) = (template.parent(), template.file_name()) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect()
}

/// `template`'s spares.
fn spares(template: &Path) -> Vec<PathBuf> {
    let (_, name) = dir_and_name(template);
    named_beside(template, &format!("{name}.spare-"))
}

/// `template`'s copies in progress (or left by a process that died mid-copy).
fn partials(template: &Path) -> Vec<PathBuf> {
    let (_, name) = dir_and_name(template);
    named_beside(template, &format!(".{name}.partial-"))
}

/// Moves a spare of `template` to `into`; false when there is none (copy instead).
pub fn take(template: &Path, into: &Path) -> bool {
    // Another start may win the rename of the same spare: try the next one.
    spares(template)
        .iter()
        .any(|spare| std::fs::rename(spare, into).is_ok())
}

/// Makes this process's refills wait for [`refill_deferred`]: a one-shot run's start
/// took a spare, and the copy and write-back of the next one (a few ms of CPU and disk)
/// would share the two CPUs with the rest of its start; it is made once the command is
/// done.
pub fn defer_refills() {
    DEFERRED.defer();
}

/// The refill [`defer_refills`] held back, made now on this thread.
pub fn refill_deferred() {
    if let Some(template) = DEFERRED.take() {
        top_up(&template);
    }
}

/// Tops the spares of `template` up to [`SPARES`] on a background thread (or later,
/// see [`defer_refills`]).
pub fn refill(template: &Path) {
    if DEFERRED.hold(template) {
        return;
    }
    if spares(template).len() >= SPARES || REFILLING.swap(true, Ordering::AcqRel) {
        return;
    }
    let template = template.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("disk-spares".into())
        .spawn(move || {
            top_up(&template);
            REFILLING.store(false, Ordering::Release);
        });
    if spawned.is_err() {
        REFILLING.store(false, Ordering::Release);
    }
}

/// Makes spares of `template` until there are [`SPARES`].
fn top_up(template: &Path) {
    remove_stale_partials(template);
    while spares(template).len() < SPARES {
        if let Err(e) = make_one(template) {
            tracing::warn!(template = %template.display(), error = %e, "cannot make a spare disk");
            break;
        }
    }
}

/// The directory of `template` and its file name.
fn dir_and_name(template: &Path) -> (&Path, String) {
    let dir = template.parent().unwrap_or(Path::new("."));
    let name = template.file_name().unwrap_or_default().to_string_lossy();
    (dir, name.into_owned())
}

/// Best effort: `template`, its spares and its copies in progress, all of them (a
/// template no start uses any more).
pub(super) fn remove_with_spares(template: &Path) {
    for file in spares(template).into_iter().chain(partials(template)) {
        let _ = std::fs::remove_file(file);
    }
    let _ = std::fs::remove_file(template);
}

/// Removes copies a process that died mid-copy left behind (older than a minute).
fn remove_stale_partials(template: &Path) {
    for partial in partials(template) {
        let stale = std::fs::metadata(&partial)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() > 60);
        if stale {
            let _ = std::fs::remove_file(partial);
        }
    }
}

fn make_one(template: &Path) -> std::io::Result<()> {
    let (dir, name) = dir_and_name(template);
    let id = uuid::Uuid::new_v4();
    let partial = dir.join(format!(".{name}.partial-{id}"));
    // Written back here, in the background: attaching a loop device fsyncs its backing
    // file (`loop_configure`), and a spare still dirty in the page cache made the start
    // that took it wait for that writeback (8-20 ms on this host's disk).
    let made = super::disk::copy_sparse(template, &partial)
        .and_then(|()| std::fs::File::open(&partial)?.sync_data())
        .and_then(|()| std::fs::rename(&partial, dir.join(format!("{name}.spare-{id}"))));
    if made.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    made
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_is_taken_once_and_refilled() {
        let dir = tempfile::tempdir().expect("tempdir");
        let template = dir.path().join("64.img");
        std::fs::write(&template, b"ext4 image stand-in").expect("template");
        assert!(!take(&template, &dir.path().join("a.img")), "no spare yet");
        make_one(&template).expect("spare");
        assert_eq!(spares(&template).len(), 1);
        let into = dir.path().join("b.img");
        assert!(take(&template, &into));
        assert_eq!(std::fs::read(&into).expect("taken"), b"ext4 image stand-in");
        assert!(spares(&template).is_empty());
        assert!(!take(&template, &dir.path().join("c.img")));
    }

    /// A copy in progress is removed as stale only after a minute (a live refill's is
    /// younger); a template no start uses goes with its spares and every copy, and
    /// never with another template's.
    #[test]
    fn stale_copies_and_a_removed_templates_files_go_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (template, other) = (dir.path().join("64.img"), dir.path().join("640.img"));
        for t in [&template, &other] {
            std::fs::write(t, b"image").expect("template");
            make_one(t).expect("spare");
        }
        let (fresh, stale) = (
            dir.path().join(".64.img.partial-fresh"),
            dir.path().join(".64.img.partial-stale"),
        );
        std::fs::write(&fresh, b"").expect("fresh copy");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
        let file = std::fs::File::create(&stale).expect("stale copy");
        file.set_modified(old).expect("age it");
        remove_stale_partials(&template);
        assert_eq!(partials(&template), vec![fresh.clone()]);
        remove_with_spares(&template);
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(
            left[0] == "640.img" && left[1].starts_with("640.img.spare-"),
            "{left:?}"
        );
    }
}
