//! Sandboxes tied to the process that started them (a one-shot `sandboxd run`), so that
//! none outlives it, even killed with SIGKILL:
//!
//! - its PID 1 keeps the start handshake open and exits (the kernel then kills every
//!   process of the sandbox) once the starter's end closes, which its death does;
//! - its state dir holds an owner mark, `run-owner`, under an exclusive `flock` the starter
//!   holds until it destroys the sandbox. A free lock means a dead owner: the next
//!   process opening the data dir (a run, or a server) removes such an orphan with its
//!   mounts, disk, cgroups, id slot and network lease ([`LinuxRuntime::orphans`],
//!   [`LinuxRuntime::remove_orphan`]). Taking the lock also keeps two sweepers apart.
//!
//! Not covered: a start killed between claiming its network (a parked or spare one) and
//! making its state dir leaves that lease behind (a server's start-up reconcile does
//! not see it either); warm inits are never tethered (a tethered runtime has no pool):
//! its early init (`warm::EarlyInit`) is tethered at its start's `Go`, and one left
//! untaken by a killed run is swept as a dead owner's warm entry.

use super::handshake::Channel;
use super::LinuxRuntime;
use crate::{Runtime, RuntimeError, SandboxHandle};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Mutex;
use uuid::Uuid;

/// The owner mark's name in a sandbox's state dir. Not `owner`: that is the warm pool's
/// own (unlocked) file, which a sandbox made from a warm init carries into its state dir;
/// read as a run's free mark, it made the sweep end servers' sandboxes.
pub(crate) const MARK: &str = "run-owner";

/// Sandbox `id`'s owner mark in data dir `data_dir` (the lock every sweeper of a dead
/// run's sandbox takes before it ends it, so two never end one at once).
pub fn owner_mark(data_dir: &Path, id: Uuid) -> std::path::PathBuf {
    data_dir.join("sandboxes").join(id.to_string()).join(MARK)
}

/// What a tethering runtime holds for each sandbox it started: the mark's lock, and
/// the host end of the handshake once PID 1 serves.
#[derive(Default)]
pub(super) struct Tethers(Mutex<HashMap<Uuid, (File, Option<Channel>)>>);

impl Tethers {
    /// Writes the owner mark into `state_dir` (this process's pid, for people) and keeps
    /// it locked for sandbox `id`.
    pub(super) fn mark(&self, id: Uuid, state_dir: &Path) -> Result<(), RuntimeError> {
        // Made under another name and locked first: a sweeper never sees it unlocked.
        let path = state_dir.join(MARK);
        let fresh = state_dir.join(format!(".{MARK}"));
        let io = |e| super::io("writing the sandbox's owner mark", &fresh)(e);
        let mut file = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&fresh)
            .map_err(io)?;
        if !try_lock(&file).map_err(io)? {
            return Err(RuntimeError::Unsupported(format!(
                "{} is locked by another process",
                fresh.display()
            )));
        }
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        std::fs::rename(&fresh, &path).map_err(io)?;
        self.lock().insert(id, (file, None));
        Ok(())
    }

    /// Keeps the host end of sandbox `id`'s handshake open while this process lives.
    pub(super) fn hold(&self, id: Uuid, channel: Channel) {
        if let Some(entry) = self.lock().get_mut(&id) {
            entry.1 = Some(channel);
        }
    }

    /// Lets sandbox `id` go: its PID 1 exits if it still runs, and its mark is unlocked.
    pub(super) fn release(&self, id: Uuid) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, (File, Option<Channel>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A sandbox whose owner mark nobody holds: its starter is dead. The mark stays locked
/// by this value, so no other sweeper removes it at the same time.
pub struct Orphan {
    pub id: Uuid,
    _lock: File,
}

/// The lock of the owner mark in `state_dir`: `Ok(Some)` now ours, `Ok(None)` no mark
/// there (an untethered sandbox), `Err(())` held by a live process (its run).
pub(super) fn lock_mark(state_dir: &Path) -> Result<Option<File>, ()> {
    let Ok(file) = File::open(state_dir.join(MARK)) else {
        return Ok(None);
    };
    match try_lock(&file) {
        Ok(true) => Ok(Some(file)),
        Ok(false) => Err(()),
        Err(_) => Ok(None),
    }
}

/// `flock(LOCK_EX | LOCK_NB)`: whether the lock is now ours.
fn try_lock(file: &File) -> std::io::Result<bool> {
    // SAFETY: flock on an fd we own, without blocking.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

impl LinuxRuntime {
    /// Ties each sandbox this runtime starts to this process (see the module doc): for a
    /// one-shot process such as `sandboxd run`.
    pub fn with_tethered_sandboxes(mut self) -> Self {
        self.tethers = Some(Tethers::default());
        self
    }

    /// The sandboxes of the data dir whose starting process died without destroying
    /// them (one readdir, and an open of each owner mark there is).
    pub fn orphans(&self) -> Vec<Orphan> {
        let Ok(entries) = std::fs::read_dir(self.sandboxes_dir()) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| {
                let id = Uuid::parse_str(entry.file_name().to_str()?).ok()?;
                let file = File::open(entry.path().join(MARK)).ok()?;
                try_lock(&file).ok()?.then_some(Orphan { id, _lock: file })
            })
            .collect()
    }

    /// Removes what is left of `orphan` (its processes if any, mounts, disk, cgroups, id
    /// slot, network lease); nothing when its state dir is gone already.
    pub fn remove_orphan(&self, orphan: &Orphan) -> Result<(), RuntimeError> {
        let dir = self.sandboxes_dir().join(orphan.id.to_string());
        if !dir.exists() {
            return Ok(());
        }
        let handle = std::fs::read(dir.join("handle.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<SandboxHandle>(&b).ok())
            .unwrap_or_else(|| super::reconcile::partial_handle(self, orphan.id, &dir));
        self.destroy(&handle)
    }
}
