//! Spare copies of the disk templates, made (and written back) in the background, so that
//! a start renames one into place instead of copying the template on its own critical path.
//!
//! Spares are plain files next to their template (`<mb>.img.spare-<uuid>`); a copy in
//! progress has a `.partial-` name and becomes a spare by rename only when complete, so
//! a process that dies mid-copy never leaves a broken spare behind.

use super::file_lock::{How, Locked};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
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

/// A spare of a template that this process alone holds (an exclusive `flock` on it,
/// taken while its spare name still named it), to attach before [`Claimed::move_to`].
pub struct Claimed {
    file: Locked,
    path: PathBuf,
}

impl Claimed {
    /// The spare, open for reading and writing.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Moves the spare to `into`; its lock goes with the file, once the name other
    /// claims look for is gone.
    pub fn move_to(self, into: &Path) -> std::io::Result<()> {
        std::fs::rename(&self.path, into)
    }
}

/// Claims a spare of `template`; None when there is none (copy instead). Other starts,
/// in this process or another, may claim at the same time: a spare is claimed by whoever
/// holds its lock while its spare name still names it, and a claim keeps that lock until
/// the spare has left that name ([`Claimed::move_to`]) or was given up (dropped).
pub fn claim(template: &Path) -> Option<Claimed> {
    spares(template).into_iter().find_map(|path| {
        let file = OpenOptions::new().read(true).write(true).open(&path).ok()?;
        let file = Locked::lock(file, How::ExclusiveNow).ok()?;
        // Locked after another claim moved it and let go: the name is gone (or, never
        // seen, names another file).
        still_names(&path, &file).then_some(Claimed { file, path })
    })
}

/// Whether `path` names the file `file` has open.
fn still_names(path: &Path, file: &File) -> bool {
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(named), Ok(held)) => named.dev() == held.dev() && named.ino() == held.ino(),
        _ => false,
    }
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
    // that took it wait for that writeback (8-20 ms on this host's disk). Its inode too,
    // once renamed (a rename changes it): that was a synchronous write in every start's
    // fsync (~0.8 ms).
    let spare = dir.join(format!("{name}.spare-{id}"));
    let made = super::disk::copy_sparse(template, &partial)
        .and_then(|()| File::open(&partial)?.sync_data())
        .and_then(|()| std::fs::rename(&partial, &spare));
    if made.is_err() {
        let _ = std::fs::remove_file(&partial);
        return made;
    }
    // A spare already (a start may claim it now): one not written back is only slower.
    File::open(&spare)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_is_claimed_once_and_moved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let template = dir.path().join("64.img");
        std::fs::write(&template, b"ext4 image stand-in").expect("template");
        assert!(claim(&template).is_none(), "no spare yet");
        make_one(&template).expect("spare");
        assert_eq!(spares(&template).len(), 1);
        let first = claim(&template).expect("the spare");
        assert!(claim(&template).is_none(), "claimed already");
        drop(first);
        let again = claim(&template).expect("given up, the spare is there again");
        // Opened by another claim before the move and locked after it: the lock is
        // free then, and the name no longer names the file.
        let spare = spares(&template).remove(0);
        let late = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&spare)
            .expect("open");
        assert!(still_names(&spare, &late));
        let into = dir.path().join("b.img");
        again.move_to(&into).expect("moved");
        let late = Locked::lock(late, How::ExclusiveNow).expect("free");
        assert!(!still_names(&spare, &late));
        assert_eq!(std::fs::read(&into).expect("taken"), b"ext4 image stand-in");
        assert!(spares(&template).is_empty());
        assert!(claim(&template).is_none());
    }

    /// Starts claiming at once (threads: each open is its own lock holder, as another
    /// process's would be) get distinct spares, each once, and the rest none.
    #[test]
    fn concurrent_claims_get_each_spare_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let template = dir.path().join("64.img");
        std::fs::write(&template, b"image").expect("template");
        for _ in 0..3 {
            make_one(&template).expect("spare");
        }
        let moved: Vec<PathBuf> = std::thread::scope(|s| {
            let claims: Vec<_> = (0..12)
                .map(|n| {
                    let (template, into) = (&template, dir.path().join(format!("{n}.img")));
                    s.spawn(move || {
                        let spare = claim(template)?;
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        spare.move_to(&into).expect("move");
                        Some(into)
                    })
                })
                .collect();
            claims
                .into_iter()
                .filter_map(|c| c.join().expect("claim"))
                .collect()
        });
        assert_eq!(moved.len(), 3, "{moved:?}");
        for into in &moved {
            assert_eq!(std::fs::read(into).expect("moved"), b"image");
        }
        assert!(spares(&template).is_empty());
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
