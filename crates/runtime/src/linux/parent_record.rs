//! The host-wide record of parent cgroups a sandboxd process made
//! (`/run/sandboxd/cgroup-parents/<name>`, holding the maker's owner mark): a runtime
//! that finds a parent whose maker is gone (killed, or it stopped while another
//! server's sandboxes kept the parent) takes the record over, and so removes the parent
//! once empty as its maker would have. A parent with no record (one an operator made)
//! is never removed; one whose maker lives is left to it.

use super::{refill, whole_file};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where the records live (tmpfs: gone at reboot, as the cgroups are).
pub const HOST_DIR: &str = "/run/sandboxd/cgroup-parents";

fn record(dir: &Path, parent: &str) -> PathBuf {
    dir.join(parent)
}

/// Whether this process answers for removing `parent`: it made it just now (`made`),
/// or the parent's record names a maker that is gone. Either way the record names this
/// process from now on.
pub fn claim(dir: &Path, parent: &str, made: bool) -> bool {
    let path = record(dir, parent);
    let ours =
        made || std::fs::read_to_string(&path).is_ok_and(|maker| !refill::owner_alive(&maker));
    if ours {
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| whole_file::replace(&path, &refill::owner_mark()));
        if let Err(e) = written {
            tracing::debug!(path = %path.display(), error = %e, "recording a made cgroup parent");
        }
    }
    ours
}

/// Parents this process made again after another runtime removed them empty (a start
/// found them gone): its runtimes answer for them as their makers do.
static REMADE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records that this process made `parent` again (see [`claim`]): the record names this
/// process, and its runtimes remove the parent once empty ([`was_remade`]).
pub fn remade(dir: &Path, parent: &str) {
    claim(dir, parent, true);
    let mut remade = REMADE.lock().unwrap_or_else(|p| p.into_inner());
    if !remade.iter().any(|p| p == parent) {
        remade.push(parent.to_owned());
    }
}

/// Whether this process made `parent` again since it was last removed.
pub fn was_remade(parent: &str) -> bool {
    let remade = REMADE.lock().unwrap_or_else(|p| p.into_inner());
    remade.iter().any(|p| p == parent)
}

/// Drops `parent`'s record once the parent is gone (removed empty).
pub fn release(dir: &Path, parent: &str, gone: bool) {
    if gone {
        REMADE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| p != parent);
        let _ = std::fs::remove_file(record(dir, parent));
    }
}

/// The mark that sandboxd made `parent`'s v1 cpuset copy (pinning makes it beside the
/// others): only then is it removed with the last pinned sandbox, never an operator's.
fn cpuset_mark(parent: &str) -> PathBuf {
    record(Path::new(HOST_DIR), &format!("{parent}.cpuset"))
}

/// Records that this process made `parent`'s cpuset copy.
pub fn cpuset_made(parent: &str) {
    let path = cpuset_mark(parent);
    let written = std::fs::create_dir_all(HOST_DIR).and_then(|()| std::fs::write(&path, ""));
    if let Err(e) = written {
        tracing::debug!(path = %path.display(), error = %e, "recording a made cpuset parent");
    }
}

/// Whether sandboxd made `parent`'s cpuset copy (so may remove it).
fn cpuset_is_ours(parent: &str) -> bool {
    cpuset_mark(parent).exists()
}

/// Drops the mark once the cpuset copy is gone.
fn cpuset_gone(parent: &str) {
    let _ = std::fs::remove_file(cpuset_mark(parent));
}

/// Removes the cpuset copy `dir` of a parent if sandboxd made it and no sandbox's
/// cpuset is left in it (best effort: a busy one stays), and then its mark. An
/// operator's (its CPUs chosen) stays.
pub fn remove_cpuset_if_ours(dir: &std::path::Path) {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if cpuset_is_ours(name) && std::fs::remove_dir(dir).is_ok() {
        cpuset_gone(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_makers_parent_is_taken_over_and_a_live_makers_or_an_operators_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        // An operator's parent: no record.
        assert!(!claim(dir.path(), "ops", false));
        // Made here: recorded with our mark, which a later finder sees alive.
        assert!(claim(dir.path(), "made", true));
        let mark = std::fs::read_to_string(dir.path().join("made")).expect("record");
        assert_eq!(mark, refill::owner_mark());
        assert!(!claim(dir.path(), "made", false));
        // A maker that is gone: taken over.
        std::fs::write(dir.path().join("dead"), "999999999 1").expect("record");
        assert!(claim(dir.path(), "dead", false));
        release(dir.path(), "dead", false);
        assert!(dir.path().join("dead").exists(), "kept while the parent is");
        release(dir.path(), "dead", true);
        assert!(!dir.path().join("dead").exists());
    }
}
