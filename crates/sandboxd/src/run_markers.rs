//! One marker per `sandboxd run` under `<data dir>/runs/`, locked (flock) by the run's
//! worker for as long as it lives and naming its sandbox once created: the teardown
//! that outlives the run's return (`run_detach`) is never lost. A marker that nobody
//! locks belongs to a worker that died before it finished (killed, even with -9: the
//! kernel drops the lock); the next run's worker destroys that sandbox through the
//! engine (idempotent: a half-done teardown is done again) and removes the marker.
//!
//! Marker file: `pid N` then, once the sandbox exists, `sandbox UUID`, one per line. It
//! is made under a dot name, locked, then renamed into place, so a visible marker is
//! always locked by a live run or by nobody.

use anyhow::{Context, Result};
use nix::fcntl::{Flock, FlockArg};
use sandboxd_engine::{Engine, ErrorCode, DEFAULT_WORKSPACE};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// A half-made marker (dot name) older than this belongs to a run killed while making it.
const STALE_TMP: Duration = Duration::from_secs(60);

/// The directory of the markers.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("runs")
}

/// This run's marker, locked.
pub struct RunMarker {
    path: PathBuf,
    file: Flock<File>,
}

impl RunMarker {
    /// Makes and locks the marker of this process.
    pub fn take(data_dir: &Path) -> Result<RunMarker> {
        let dir = dir(data_dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let name = Uuid::new_v4().to_string();
        let tmp = dir.join(format!(".{name}"));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        let mut file = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .context("locking the run's marker")?;
        writeln!(file, "pid {}", std::process::id()).context("writing the run's marker")?;
        let path = dir.join(name);
        std::fs::rename(&tmp, &path).context("placing the run's marker")?;
        Ok(RunMarker { path, file })
    }

    /// Records the run's sandbox, before anything else is done with it.
    pub fn record(&mut self, id: Uuid) -> Result<()> {
        writeln!(self.file, "sandbox {id}").context("recording the run's sandbox")
    }

    /// The run's teardown failed: the marker stays, locked until this process exits (no
    /// other run's sweep may end the sandbox while this one still lives), then for the
    /// next sweep to try again.
    pub fn keep_until_exit(self) {
        std::mem::forget(self.file);
    }

    /// The run finished its teardown: the marker goes (unlinked while still locked).
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The sandbox a marker names, if any.
fn sandbox_of(file: &mut File) -> Option<Uuid> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("sandbox "))
        .and_then(|id| Uuid::parse_str(id.trim()).ok())
}

/// The markers no live run holds, each locked now (so two sweepers never do one twice).
fn dead(data_dir: &Path) -> Vec<(PathBuf, Flock<File>)> {
    let Ok(entries) = std::fs::read_dir(dir(data_dir)) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .is_some_and(|age| age > STALE_TMP);
            if old {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        let Ok(file) = std::fs::OpenOptions::new().read(true).open(&path) else {
            continue;
        };
        if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            // Still there once locked (not a marker its run just removed)?
            if path.exists() {
                found.push((path, lock));
            }
        }
    }
    found
}

/// Destroys the sandboxes of runs that died before their teardown finished, and removes
/// their markers; a destroy that fails leaves its marker for the next sweep.
pub async fn sweep(engine: &Engine, data_dir: &Path) {
    for (path, mut lock) in dead(data_dir) {
        let done = match sandbox_of(&mut lock) {
            None => true,
            Some(id) => {
                // Held by this sweep through the destroy; skipped (marker left for the
                // next sweep) when another sweeper (`run_orphans`) holds it.
                let Some(_owner) = owner_lock(data_dir, id) else {
                    continue;
                };
                destroyed(engine, id).await
            }
        };
        if done {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The lock of sandbox `id`'s owner mark, which `run_orphans` also takes: `Some` when
/// it is now ours or there is no mark (a gVisor sandbox, or a state dir gone already),
/// `None` when another process holds it.
fn owner_lock(data_dir: &Path, id: Uuid) -> Option<Option<Flock<File>>> {
    let mark = sandboxd_runtime::linux::owner_mark(data_dir, id);
    let Ok(file) = File::open(&mark) else {
        return Some(None);
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(held) => Some(Some(held)),
        Err(_) => None,
    }
}

/// Ends the dead run's sandbox `id`: whether it is gone now.
async fn destroyed(engine: &Engine, id: Uuid) -> bool {
    match engine.destroy(&DEFAULT_WORKSPACE.to_owned(), id).await {
        Ok(_) => true,
        Err(e) if e.code == ErrorCode::SandboxNotFound => true,
        Err(e) => {
            tracing::warn!(sandbox = %id, error = %e, "cannot end a dead run's sandbox");
            false
        }
    }
}

/// Blocks until no live run on `data_dir` is still tearing its sandbox down (each
/// worker holds its marker's lock until it is done); dead runs' markers are left.
pub fn wait_all(data_dir: &Path) {
    loop {
        let Ok(entries) = std::fs::read_dir(dir(data_dir)) else {
            return;
        };
        let mut waited = false;
        for entry in entries.filter_map(|e| e.ok()) {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(file) = File::open(entry.path()) else {
                continue;
            };
            if let Err((file, _)) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                waited = true;
                let _ = Flock::lock(file, FlockArg::LockExclusive);
            }
        }
        if !waited {
            return;
        }
    }
}
