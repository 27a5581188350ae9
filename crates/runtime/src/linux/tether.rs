//! Sandboxes tied to the process that started them (a one-shot `sandboxd run`), so that
//! none outlives it, even killed with SIGKILL. This is the only mechanism for runs killed
//! before their teardown finished, on both tiers:
//!
//! - a container's PID 1 keeps the start handshake open and exits (the kernel then kills
//!   every process of the sandbox) once the starter's end closes, which its death does;
//! - each sandbox has an owner mark, `sandboxes/<id>.run-owner` (beside its state dir,
//!   so that it outlives the dir's removal), under an exclusive `flock` its starter takes
//!   before the state dir exists and holds until its whole teardown is done (the
//!   engine's record ended too; [`Tethers::finish_released`] then removes the mark). A
//!   free lock means a dead owner: the next process opening the data dir (a run, or a
//!   server every few seconds) ends such an orphan through the engine and removes what
//!   is left of it ([`LinuxRuntime::orphans`], [`LinuxRuntime::remove_orphan`]), gVisor
//!   sandboxes included (their sentry is not tethered: it runs until that sweep).
//!   Taking the lock also keeps two sweepers apart, and a server's start-up reconcile
//!   away from a live run's sandbox.
//!
//! Data dirs of older binaries: their mark was `<id>/run-owner` inside the state dir;
//! such a mark is still honoured (held: left alone; free: an orphan).
//!
//! A start's mark comes before anything else it makes on the host: with egress, before
//! its network is claimed (a parked network, a server's spare) or allocated, so a start
//! killed while it waits (e.g. for its early init) is an orphan whose lease the sweep
//! removes even though it never had a state dir, and its STARTING record is ended.
//! Before that, the engine claims the mark ([`Runtime::claim`]) before it inserts the
//! sandbox's record, so a run killed between the two leaves a mark beside its PENDING
//! record, which the sweep ends like any other (a claim its start never used is given
//! back by [`Runtime::unclaim`] when the start fails with nothing made).
//! Warm inits are never tethered (a tethered runtime has no pool): its early init
//! (`warm::EarlyInit`) is tethered at its start (at its `Go`; parked in its root, at
//! its `Start`, after which its PID 1 keeps watching the handshake the start holds), and
//! one left untaken by a killed run is swept as a dead owner's warm entry (a parked PID 1
//! exits as soon as its run's end of the handshake closes).

use super::handshake::Channel;
use super::LinuxRuntime;
use crate::{Isolation, Runtime, RuntimeError, SandboxHandle};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// The owner mark's suffix. Not `owner`: that is the warm pool's own (unlocked) file,
/// which a sandbox made from a warm init carries into its state dir; read as a run's
/// free mark, it made the sweep end servers' sandboxes.
pub(crate) const MARK: &str = "run-owner";

/// Sandbox `id`'s owner mark in data dir `data_dir` (the lock every sweeper of a dead
/// run's sandbox takes before it ends it, so two never end one at once).
pub fn owner_mark(data_dir: &Path, id: Uuid) -> PathBuf {
    mark_in(&data_dir.join("sandboxes"), id)
}

fn mark_in(sandboxes: &Path, id: Uuid) -> PathBuf {
    sandboxes.join(format!("{id}.{MARK}"))
}

/// An older binary's mark, inside the state dir.
fn legacy_mark(sandboxes: &Path, id: Uuid) -> PathBuf {
    sandboxes.join(id.to_string()).join(MARK)
}

/// One sandbox's tether: its mark, locked, and the host end of a container's handshake
/// once PID 1 serves (`None` on gVisor, and once destroyed).
struct Tether {
    mark: PathBuf,
    lock: File,
    channel: Option<Channel>,
    destroyed: bool,
    /// Made by [`Tethers::claim`] and not yet used by a start (no start step marked it).
    claim_only: bool,
}

/// What a tethering process holds for each sandbox it started; shared by its tiers.
#[derive(Default)]
pub struct Tethers(Mutex<HashMap<Uuid, Tether>>);

impl Tethers {
    /// For [`LinuxRuntime::with_tethers`] and the gVisor tier's.
    pub fn new() -> Arc<Tethers> {
        Arc::new(Tethers::default())
    }

    /// Makes sandbox `id`'s owner mark in `sandboxes` (this process's pid inside, for
    /// people) and keeps it locked. Before the state dir exists, and before anything
    /// else its start makes on the host (its network's lease first). A mark this
    /// process already holds for a start under way is kept (a start with egress marks
    /// before its network, then its container start marks again).
    pub(crate) fn mark(&self, id: Uuid, sandboxes: &Path) -> Result<(), RuntimeError> {
        if let Some(held) = self.lock().get_mut(&id).filter(|t| !t.destroyed) {
            // A start's step now relies on it: no longer only the engine's claim.
            held.claim_only = false;
            return Ok(());
        }
        // Made under a dot name and locked first: a sweeper never sees it unlocked.
        let path = mark_in(sandboxes, id);
        let fresh = sandboxes.join(format!(".{id}.{MARK}"));
        let io = |e| super::io("writing the sandbox's owner mark", &fresh)(e);
        let mut file = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&fresh)
            .map_err(io)?;
        let placed = match try_lock(&file) {
            Ok(true) => writeln!(file, "pid {}", std::process::id())
                .and_then(|()| std::fs::rename(&fresh, &path))
                .map_err(io),
            Ok(false) => Err(RuntimeError::Unsupported(format!(
                "{} is locked by another process",
                fresh.display()
            ))),
            Err(e) => Err(io(e)),
        };
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&fresh);
            return Err(e);
        }
        self.lock().insert(
            id,
            Tether {
                mark: path,
                lock: file,
                channel: None,
                destroyed: false,
                claim_only: false,
            },
        );
        Ok(())
    }

    /// Sandbox `id`'s mark, made before the engine records the sandbox (see the module
    /// doc); its start's steps then find it held.
    pub(crate) fn claim(&self, id: Uuid, sandboxes: &Path) -> Result<(), RuntimeError> {
        self.mark(id, sandboxes)?;
        if let Some(held) = self.lock().get_mut(&id) {
            held.claim_only = true;
        }
        Ok(())
    }

    /// Gives back a claim no start step used (nothing of sandbox `id` is on the host):
    /// its mark goes at [`Tethers::finish_released`]. A mark a start step made or kept
    /// stays, as that step's failure handling left it.
    pub(crate) fn unclaim(&self, id: Uuid) {
        if let Some(held) = self.lock().get_mut(&id).filter(|t| t.claim_only) {
            held.destroyed = true;
        }
    }

    /// Whether this process holds sandbox `id`'s mark.
    pub(crate) fn holds(&self, id: Uuid) -> bool {
        self.lock().contains_key(&id)
    }

    /// Keeps the host end of sandbox `id`'s handshake open while this process lives.
    pub(super) fn hold(&self, id: Uuid, channel: Channel) {
        if let Some(tether) = self.lock().get_mut(&id) {
            tether.channel = Some(channel);
        }
    }

    /// Sandbox `id` is destroyed: its PID 1 exits if it still ran; its mark stays
    /// locked until [`Tethers::finish_released`] (the rest of the teardown).
    pub(crate) fn release(&self, id: Uuid) {
        if let Some(tether) = self.lock().get_mut(&id) {
            tether.channel = None;
            tether.destroyed = true;
        }
    }

    /// Removes the marks of the sandboxes this process destroyed (call once their
    /// records are ended): a waiter sees their teardown done. A sandbox whose destroy
    /// failed keeps its mark locked until this process exits, then for the next sweep.
    pub fn finish_released(&self) {
        let mut all = self.lock();
        let done: Vec<Uuid> = all
            .iter()
            .filter(|(_, t)| t.destroyed)
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            if let Some(tether) = all.remove(&id) {
                // Unlinked while still locked: a sweeper that opened it before sees
                // it gone once it has the lock.
                let _ = std::fs::remove_file(&tether.mark);
                drop(tether.lock);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Tether>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Blocks until no live process holds an owner mark of data dir `data_dir` (every run
/// has finished its teardown); dead runs' marks are left.
pub fn wait_for_runs(data_dir: &Path) {
    let sandboxes = data_dir.join("sandboxes");
    loop {
        let mut waited = false;
        for (_, path) in marks(&sandboxes) {
            let Ok(file) = File::open(&path) else {
                continue;
            };
            if !try_lock(&file).unwrap_or(true) {
                waited = true;
                // SAFETY: a blocking flock on an fd we own.
                unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            }
        }
        if !waited {
            return;
        }
    }
}

/// The owner marks in `sandboxes`: beside the state dirs, and older binaries' inside.
fn marks(sandboxes: &Path) -> Vec<(Uuid, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(sandboxes) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(id) = name
            .strip_suffix(MARK)
            .and_then(|n| n.strip_suffix('.'))
            .and_then(|n| Uuid::parse_str(n).ok())
        {
            found.push((id, entry.path()));
        } else if let Ok(id) = Uuid::parse_str(name) {
            let legacy = legacy_mark(sandboxes, id);
            if legacy.exists() {
                found.push((id, legacy));
            }
        }
    }
    found
}

/// A sandbox whose owner mark nobody holds: its starter is dead. The mark stays locked
/// by this value, so no other sweeper removes it at the same time.
pub struct Orphan {
    pub id: Uuid,
    mark: PathBuf,
    _lock: File,
}

/// The lock of sandbox `id`'s owner mark in `sandboxes`: `Ok(Some)` now ours, `Ok(None)`
/// no mark (an untethered sandbox), `Err(())` held by a live process (its run).
pub(super) fn lock_mark(sandboxes: &Path, id: Uuid) -> Result<Option<File>, ()> {
    let mut held = None;
    for path in [mark_in(sandboxes, id), legacy_mark(sandboxes, id)] {
        let Ok(file) = File::open(path) else { continue };
        match try_lock(&file) {
            Ok(true) => held = Some(file),
            Ok(false) => return Err(()),
            Err(_) => {}
        }
    }
    Ok(held)
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
    /// Ties each sandbox this runtime starts to this process (see the module doc), with
    /// `tethers` shared by the process's tiers: for a one-shot process such as
    /// `sandboxd run`. Before [`LinuxRuntime::with_early_init`]: an early init begun
    /// untethered could not be tethered afterwards (a construction-order contract,
    /// checked).
    pub fn with_tethers(mut self, tethers: Arc<Tethers>) -> Self {
        assert!(
            self.early.is_none(),
            "with_tethers after with_early_init: the early init would outlive a killed run"
        );
        self.tethers = Some(tethers);
        self
    }

    /// The sandboxes of the data dir whose starting process died without finishing
    /// their teardown (one readdir, and an open of each owner mark there is).
    pub fn orphans(&self) -> Vec<Orphan> {
        marks(&self.sandboxes_dir())
            .into_iter()
            .filter_map(|(id, mark)| {
                let file = File::open(&mark).ok()?;
                // Still there once locked (not a mark its run just removed)?
                (try_lock(&file).ok()? && mark.exists()).then_some(Orphan {
                    id,
                    mark,
                    _lock: file,
                })
            })
            .collect()
    }

    /// Whether sandbox `id`'s owner mark is held by a live process (its run).
    pub fn run_holds(&self, id: Uuid) -> bool {
        lock_mark(&self.sandboxes_dir(), id).is_err()
    }

    /// Removes what is left of `orphan` (its processes if any, mounts, disk, cgroups,
    /// id slot, network lease) through `tiers` (the gVisor tier's sandboxes need it),
    /// then its mark; a failure leaves the mark for the next sweep.
    ///
    /// A start killed before its state dir existed (its mark is made first) may have
    /// claimed or allocated its network already: that is removed (not parked) here.
    pub fn remove_orphan(&self, orphan: Orphan, tiers: &dyn Runtime) -> Result<(), RuntimeError> {
        let dir = self.sandboxes_dir().join(orphan.id.to_string());
        if !dir.exists() {
            super::net::remove_unstarted(self, orphan.id);
        } else {
            let handle = std::fs::read(dir.join("handle.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<SandboxHandle>(&b).ok())
                .unwrap_or_else(|| {
                    let mut handle = super::reconcile::partial_handle(self, orphan.id, &dir);
                    // A gVisor start killed before its handle: its bundle is there.
                    if dir.join("config.json").exists() {
                        handle.isolation = Isolation::Gvisor;
                        handle.agent_socket = super::gvisor::agent_dir::host_socket(&dir);
                    }
                    handle
                });
            tiers.destroy(&handle)?;
        }
        let _ = std::fs::remove_file(&orphan.mark);
        Ok(())
    }
}
