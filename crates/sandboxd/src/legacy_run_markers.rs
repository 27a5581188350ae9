//! Migration: per-run markers under `<data dir>/runs/`, which binaries before the merge
//! of the killed-run mechanisms into the owner mark (runtime's `tether`) kept beside it.
//! A gVisor run's sandbox of such a binary has no owner mark, only its marker: a marker
//! nobody locks (its run died before its teardown finished) names a sandbox that is
//! ended here, through the engine, then the marker goes; the directory goes once empty.
//! New binaries make no markers.
//!
//! Marker file: `pid N` then, once the sandbox existed, `sandbox UUID`, one per line.

use nix::fcntl::{Flock, FlockArg};
use sandboxd_engine::{Engine, ErrorCode, DEFAULT_WORKSPACE};
use sandboxd_runtime::linux::LinuxRuntime;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use uuid::Uuid;

/// Ends the sandboxes of older binaries' dead runs that `runs/` markers name.
pub(crate) async fn sweep(engine: &Engine, linux: &LinuxRuntime, data_dir: &Path) {
    let dir = data_dir.join("runs");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(file) = File::open(&path) else {
            continue;
        };
        // Held: a live run of an older binary (it ends its sandbox itself).
        let Ok(mut held) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
            continue;
        };
        if let Some(id) = sandbox_of(&mut held) {
            // A sandbox with an owner mark some process holds is left to it.
            if linux.run_holds(id) {
                continue;
            }
            tracing::info!(sandbox = %id, "ending a dead run's sandbox (runs/ marker of an older binary)");
            match engine.destroy(&DEFAULT_WORKSPACE.to_owned(), id).await {
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::SandboxNotFound => {}
                Err(e) => {
                    tracing::warn!(sandbox = %id, error = %e, "cannot end a dead run's sandbox");
                    continue;
                }
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    // Only once empty (a live older run's marker keeps it).
    let _ = std::fs::remove_dir(&dir);
}

/// The sandbox a marker names, if any.
fn sandbox_of(file: &mut File) -> Option<Uuid> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("sandbox "))
        .and_then(|id| Uuid::parse_str(id.trim()).ok())
}
