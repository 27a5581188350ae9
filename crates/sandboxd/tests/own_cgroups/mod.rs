//! The tests' own parent cgroups: one per data dir (`sandboxd-test-<dir name>`), so a
//! test removing its parent never races another's, each removed when the test process
//! exits if nothing is left in it. A runtime removes only a parent it made, and not
//! every runtime is dropped (tests play servers that stop, engines keep theirs), so the
//! fixtures remove their own at exit. Never the host's shared `sandboxd` parent.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The parents this process named, to remove at its exit.
static OWN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The parent cgroup name for data dir `dir` (named after its last component),
/// removed at this process's exit when empty.
pub fn parent_for(dir: &Path) -> String {
    let name = format!(
        "sandboxd-test-{}",
        dir.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("x")
            .trim_start_matches('.')
    );
    let mut own = OWN.lock().unwrap_or_else(|p| p.into_inner());
    if own.is_empty() {
        // SAFETY: atexit(3) with a plain `extern "C"` function that does not unwind
        // (it ignores every error).
        unsafe { libc::atexit(remove_own) };
    }
    if !own.contains(&name) {
        own.push(name.clone());
    }
    name
}

/// Removes each parent this process named, in every hierarchy, if it is empty: rmdir(2)
/// fails on a cgroup with a child or a task, so a sandbox a test left keeps it.
extern "C" fn remove_own() {
    let own = OWN.lock().unwrap_or_else(|p| p.into_inner());
    let root = PathBuf::from("/sys/fs/cgroup");
    let mut roots = vec![root.clone()];
    if let Ok(hierarchies) = std::fs::read_dir(&root) {
        roots.extend(hierarchies.flatten().map(|e| e.path()));
    }
    for name in own.iter() {
        for root in &roots {
            let _ = std::fs::remove_dir(root.join(name));
        }
        // The runtime's record of a parent it made (`parent_record`), once it is gone.
        if roots.iter().all(|r| !r.join(name).exists()) {
            let records = Path::new("/run/sandboxd/cgroup-parents");
            let _ = std::fs::remove_file(records.join(name));
            let _ = std::fs::remove_file(records.join(format!("{name}.cpuset")));
        }
    }
}
