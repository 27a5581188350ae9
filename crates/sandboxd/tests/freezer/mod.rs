//! Freezing a sandbox by hand, behind the server's back: a sandbox that cannot answer.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The sandbox's freezer state file (cgroup v1 `freezer.state`, v2 `cgroup.freeze`).
pub fn freezer_file(id: &str) -> PathBuf {
    let v1 = Path::new("/sys/fs/cgroup/freezer/sandboxd").join(id);
    match v1.is_dir() {
        true => v1.join("freezer.state"),
        false => Path::new("/sys/fs/cgroup/sandboxd")
            .join(id)
            .join("cgroup.freeze"),
    }
}

/// Whether the sandbox is frozen (or freezing).
pub fn is_frozen(id: &str) -> bool {
    std::fs::read_to_string(freezer_file(id))
        .is_ok_and(|s| matches!(s.trim(), "FROZEN" | "FREEZING" | "1"))
}

pub fn set_frozen(id: &str, frozen: bool) {
    let file = freezer_file(id);
    let value = match (file.ends_with("freezer.state"), frozen) {
        (true, true) => "FROZEN",
        (true, false) => "THAWED",
        (false, true) => "1",
        (false, false) => "0",
    };
    std::fs::write(&file, value).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
}

/// Thaws the sandbox whatever happened before (cleanup after a failed test).
pub fn thaw(id: &str) {
    let _ = std::fs::write(freezer_file(id), "THAWED");
    let _ = std::fs::write(freezer_file(id), "0");
}
