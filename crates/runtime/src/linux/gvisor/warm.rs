//! Warm gVisor sandboxes: a few sandboxes started ahead of time (root mounted, disk
//! attached, `runsc create` and `start` done, the agent accepting on its socket), so
//! that a start without network takes one instead of paying for runsc on its critical
//! path. The same idea as the container tier's warm inits (`linux/warm/`), for runsc.
//!
//! An entry is a whole sandbox under the name `key`: its state dir is
//! `sandboxes/.gvwarm-<key>/`, its cgroup `<parent>/<key>`, its runsc container `key`.
//! A start that takes it renames the dir and the cgroup to the sandbox's id, sets the
//! sandbox's limits on the cgroup, writes the bundle again for the new paths (a restore
//! reads them) and records the runsc container's name in [`RUNSC_ID`] (runsc cannot
//! rename a container). What it cannot change afterwards decides what it serves: the
//! image's layers, the disk size and no network. Entries start with the hostname
//! [`HOSTNAME`]; a start asking for another sets it on the taken entry through
//! `runsc exec` with `CAP_SYS_ADMIN` (the UTS name is the sentry's, and the agent has no
//! capability to change it), as a clone restored from a memory snapshot does.
//!
//! Refills run on a background thread after each take; [`GvisorWarm::drain`] (also on
//! drop) destroys every entry. A server killed before it could drain leaves running
//! entries; the next runtime that opens the data dir destroys those whose owner is gone.

use super::{destroy, start, GvisorRuntime};
use crate::linux::{io, refill};
use crate::{NetworkSpec, RuntimeError, SandboxHandle, SandboxSpec, WarmPoolStats};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Name prefix of a warm entry's state dir under `sandboxes/`.
pub(in crate::linux) const DIR_PREFIX: &str = ".gvwarm-";
/// File in a sandbox's state dir naming its runsc container, when that is not its id
/// (a sandbox made from a warm entry keeps the entry's container).
pub(super) const RUNSC_ID: &str = "runsc-id";
/// File in an entry's dir marking the process that owns it.
const OWNER: &str = "owner";
/// The hostname entries are made with (a start asking for another sets its own).
pub const HOSTNAME: &str = "sandbox";
/// Limits an entry runs under until a start sets its own.
const ENTRY_VCPU: u32 = 1;
const ENTRY_MEMORY_MB: u32 = 512;
const ENTRY_PIDS: u32 = 256;

/// The runsc container name of `handle`'s sandbox.
pub(super) fn runsc_id(handle: &SandboxHandle) -> String {
    runsc_id_in(&handle.state_dir).unwrap_or_else(|| handle.id.to_string())
}

/// The runsc container name recorded in `state_dir`, if one is.
pub(super) fn runsc_id_in(state_dir: &Path) -> Option<String> {
    std::fs::read_to_string(state_dir.join(RUNSC_ID))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// What entries are made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Shape {
    pub image: String,
    /// The image's layer dirs, top first (a rebuilt image has others).
    pub layers: Vec<PathBuf>,
    pub disk_mb: u32,
}

struct Entry {
    /// Its handle under its key (`id` is the key).
    handle: SandboxHandle,
    shape: Shape,
}

pub(super) struct Shared {
    /// Makes and destroys entries: a runtime of its own over the same data dir.
    maker: GvisorRuntime,
    size: usize,
    /// Filled for what starts ask ([`GvisorWarm::demand`]), not only for the shape
    /// [`GvisorWarm::prefer`] names.
    on_demand: bool,
    entries: Mutex<Vec<Entry>>,
    shape: Mutex<Option<Shape>>,
    filling: AtomicBool,
    closed: AtomicBool,
    /// Whether the image records are watched (see `warm_watch`).
    watching: AtomicBool,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// The pool; dropping it destroys every entry.
pub(super) struct GvisorWarm(Arc<Shared>);

impl GvisorWarm {
    /// A pool of `size` entries made by `maker`, filled once [`GvisorWarm::prefer`] says
    /// for what, or (`on_demand`) once a start [`GvisorWarm::demand`]s one.
    pub fn new(maker: GvisorRuntime, size: usize, on_demand: bool) -> Self {
        GvisorWarm(Arc::new(Shared {
            maker,
            size,
            on_demand,
            entries: Mutex::new(Vec::new()),
            shape: Mutex::new(None),
            filling: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            watching: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }))
    }

    /// Makes entries of `shape` from now on (in the background), until its image is
    /// removed or moves to other layers (the image records are watched from the first
    /// shape on: `warm_watch`).
    pub fn prefer(&self, shape: Shape) {
        if let Ok(mut s) = self.0.shape.lock() {
            *s = Some(shape);
        }
        if !self.0.watching.swap(true, Ordering::AcqRel) {
            super::warm_watch::watch(&self.0);
        }
        self.refill();
    }

    /// A start of `shape` found no entry and started cold: an on-demand pool makes
    /// entries of that shape from now on (the first such start begins the pool; a
    /// later one of another shape moves it there). A pool filled for one shape only
    /// ([`GvisorWarm::prefer`]) keeps it.
    pub fn demand(&self, shape: Shape) {
        if !self.0.on_demand {
            return;
        }
        let same = self
            .0
            .shape
            .lock()
            .is_ok_and(|s| s.as_ref() == Some(&shape));
        match same {
            true => self.refill(),
            false => self.prefer(shape),
        }
    }

    /// Entries ready to be taken.
    pub fn ready(&self) -> usize {
        self.0.entries.lock().map_or(0, |e| e.len())
    }

    /// Keys (runsc container names) of the entries held now.
    pub fn keys(&self) -> Vec<Uuid> {
        self.0
            .entries
            .lock()
            .map_or_else(|_| Vec::new(), |e| e.iter().map(|e| e.handle.id).collect())
    }

    pub fn stats(&self) -> WarmPoolStats {
        WarmPoolStats {
            ready: self.ready() as u64,
            hits: self.0.hits.load(Ordering::Relaxed),
            misses: self.0.misses.load(Ordering::Relaxed),
            target: self.0.size as u64,
        }
    }

    /// A sandbox of `spec` (of image layers `layers`, top first) from an entry, made
    /// over to `spec`'s id, limits and hostname; `None` when none fits (or handing one
    /// over failed: what it made is removed) and the caller starts cold.
    pub fn take(
        &self,
        rt: &GvisorRuntime,
        spec: &SandboxSpec,
        layers: &[PathBuf],
    ) -> Option<SandboxHandle> {
        if self.0.closed.load(Ordering::Acquire) {
            return None;
        }
        let fits = |e: &Entry| {
            e.shape.image == spec.image
                && e.shape.layers == layers
                && e.shape.disk_mb == spec.disk_mb
        };
        let taken = loop {
            let entry = {
                let mut entries = self.0.entries.lock().ok()?;
                entries
                    .iter()
                    .position(fits)
                    .map(|i| entries.swap_remove(i))
            };
            let Some(entry) = entry else {
                break None;
            };
            if crate::Runtime::is_alive(rt, &entry.handle) {
                break Some(entry);
            }
            self.0.discard(entry);
        };
        let handle = match taken {
            Some(entry) if spec.extra_layers.is_empty() => {
                match rename_host(rt, &entry, spec).and_then(|()| hand_over(rt, &entry, spec)) {
                    Ok(handle) => Some(handle),
                    Err(e) => {
                        tracing::warn!(error = %e, "handing a warm gVisor sandbox over failed");
                        None
                    }
                }
            }
            Some(entry) => {
                // Not for this start after all: back for the next one, unless the pool
                // was drained meanwhile (nothing would remove it then).
                match self.0.entries.lock() {
                    Ok(mut entries) if !self.0.closed.load(Ordering::Acquire) => {
                        entries.push(entry)
                    }
                    _ => self.0.discard(entry),
                }
                None
            }
            None => None,
        };
        let counter = match handle.is_some() {
            true => &self.0.hits,
            false => &self.0.misses,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if handle.is_some() {
            self.refill();
        }
        handle
    }

    fn refill(&self) {
        self.0.refill();
    }

    /// Destroys every entry and makes no more (also run on drop).
    pub fn drain(&self) {
        self.0.closed.store(true, Ordering::Release);
        refill::wait_idle(&self.0.filling);
        let entries = match self.0.entries.lock() {
            Ok(mut e) => std::mem::take(&mut *e),
            Err(_) => return,
        };
        for entry in entries {
            self.0.discard(entry);
        }
    }
}

impl Drop for GvisorWarm {
    fn drop(&mut self) {
        self.drain();
    }
}

/// Gives `entry` `spec`'s hostname when it is not the entry's; on failure the entry is
/// destroyed.
fn rename_host(rt: &GvisorRuntime, entry: &Entry, spec: &SandboxSpec) -> Result<(), RuntimeError> {
    if spec.hostname == HOSTNAME {
        return Ok(());
    }
    let set = start::set_hostname(rt, &runsc_id(&entry.handle), &spec.hostname);
    if set.is_err() {
        if let Err(e) = destroy::destroy(rt, &entry.handle) {
            tracing::error!(error = %e, "removing a warm gVisor sandbox");
        }
    }
    set
}

/// Makes `entry` sandbox `spec.id`: its dir and cgroup renamed, its limits set, its
/// bundle written for the new paths, its handle saved. On failure what it made is
/// removed (under either name).
fn hand_over(
    rt: &GvisorRuntime,
    entry: &Entry,
    spec: &SandboxSpec,
) -> Result<SandboxHandle, RuntimeError> {
    let key = entry.handle.id;
    let state_dir = rt.linux.sandboxes_dir().join(spec.id.to_string());
    let handle = SandboxHandle {
        id: spec.id,
        agent_pid: entry.handle.agent_pid,
        agent_start_ticks: entry.handle.agent_start_ticks,
        agent_socket: super::agent_dir::host_socket(&state_dir),
        state_dir: state_dir.clone(),
        host_id_base: 0,
        warm: true,
        isolation: crate::Isolation::Gvisor,
    };
    let made = (|| {
        let record = entry.handle.state_dir.join(RUNSC_ID);
        std::fs::write(&record, key.to_string())
            .map_err(io("recording the runsc container", &record))?;
        std::fs::rename(&entry.handle.state_dir, &state_dir)
            .map_err(io("renaming a warm gVisor sandbox's dir", &state_dir))?;
        rt.linux.cgroups.rename(key, spec.id)?;
        rt.linux.cgroups.set_limits(spec.id, start::limits(spec))?;
        start::write_bundle(rt, spec, &state_dir, false)?;
        let _ = std::fs::remove_file(state_dir.join(OWNER));
        start::save_handle(&handle)
    })();
    if let Err(e) = made {
        for h in [&handle, &entry.handle] {
            if let Err(cleanup) = destroy::destroy(rt, h) {
                tracing::error!(error = %cleanup, "removing a warm gVisor sandbox");
            }
        }
        // Under its key, the cgroup may be left when the rename failed.
        let _ = rt.linux.cgroups.kill_and_remove(key);
        return Err(e);
    }
    Ok(handle)
}

impl Shared {
    pub(super) fn refill(self: &Arc<Self>) {
        refill::spawn(self, |s| &s.filling, "gvisor-warm", Shared::fill);
    }

    /// Whether a refill runs now.
    pub(super) fn filling(&self) -> bool {
        self.filling.load(Ordering::Acquire)
    }

    pub(super) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The data dir (its image records).
    pub(super) fn data_dir(&self) -> &Path {
        &self.maker.linux.config.data_dir
    }

    /// Forgets the shape entries are made for when its image no longer resolves to its
    /// layers (removed, or its name moved); its entries go at the next refill. Returns
    /// whether it did.
    pub(super) fn forget_removed_image(&self) -> bool {
        let Ok(mut shape) = self.shape.lock() else {
            return false;
        };
        let gone = shape.as_ref().is_some_and(|s| {
            !crate::linux::warm::still_stacks(self.data_dir(), &s.image, &s.layers)
        });
        if gone {
            *shape = None;
        }
        gone
    }

    fn discard(&self, entry: Entry) {
        if let Err(e) = destroy::destroy(&self.maker, &entry.handle) {
            tracing::warn!(key = %entry.handle.id, error = %e, "removing a warm gVisor sandbox");
        }
    }

    fn fill(&self) {
        let mut failures = 0;
        loop {
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            let Some(shape) = self.shape.lock().ok().and_then(|s| s.clone()) else {
                // No shape (any more: its image was removed): no entry serves a start.
                let stale = self.entries.lock().map(|mut e| std::mem::take(&mut *e));
                for entry in stale.unwrap_or_default() {
                    self.discard(entry);
                }
                return;
            };
            let (stale, have) = match self.entries.lock() {
                Ok(mut e) => {
                    let (keep, stale): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut *e)
                        .into_iter()
                        .partition(|e| e.shape == shape);
                    *e = keep;
                    (stale, e.len())
                }
                Err(_) => return,
            };
            for entry in stale {
                self.discard(entry);
            }
            if have >= self.size {
                return;
            }
            let entry = match self.make(&shape) {
                Ok(entry) => {
                    failures = 0;
                    entry
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot prepare a warm gVisor sandbox");
                    // Tried again a few times, waiting longer each time.
                    failures += 1;
                    match refill::retry_after_failure(failures, &self.closed, "warm gVisor") {
                        true => continue,
                        false => return,
                    }
                }
            };
            let closed = self.closed.load(Ordering::Acquire);
            // Made for a shape forgotten meanwhile (its image removed): not kept.
            let current = self
                .shape
                .lock()
                .is_ok_and(|s| s.as_ref() == Some(&entry.shape));
            match self.entries.lock() {
                Ok(mut e) if !closed && current && e.len() < self.size => e.push(entry),
                _ => {
                    self.discard(entry);
                    return;
                }
            }
        }
    }

    fn make(&self, shape: &Shape) -> Result<Entry, RuntimeError> {
        crate::faults::check("warm.make")?;
        let key = Uuid::new_v4();
        let spec = SandboxSpec {
            id: key,
            image: shape.image.clone(),
            extra_layers: vec![],
            hostname: HOSTNAME.into(),
            vcpu: ENTRY_VCPU,
            memory_mb: ENTRY_MEMORY_MB,
            pids_max: ENTRY_PIDS,
            disk_mb: shape.disk_mb,
            isolation: crate::Isolation::Gvisor,
        };
        let dir = self
            .maker
            .linux
            .sandboxes_dir()
            .join(format!("{DIR_PREFIX}{key}"));
        // The owner goes in first: an entry dir without one is no make under way.
        let mark = refill::owner_mark();
        let first = Some((OWNER, mark.as_str()));
        let handle = start::start_at(&self.maker, &spec, &NetworkSpec::none(), None, dir, first)?;
        Ok(Entry {
            handle,
            shape: shape.clone(),
        })
    }
}

/// Destroys the entries under the data dir whose owner is gone (a server killed before
/// it drained its pool) or that have none (a make or removal cut short).
pub(super) fn sweep_stale(rt: &GvisorRuntime) {
    let Ok(dirs) = std::fs::read_dir(rt.linux.sandboxes_dir()) else {
        return;
    };
    for dir in dirs.filter_map(|e| e.ok()) {
        let name = dir.file_name().to_string_lossy().into_owned();
        let Some(key) = name
            .strip_prefix(DIR_PREFIX)
            .and_then(|k| Uuid::parse_str(k).ok())
        else {
            continue;
        };
        let owner_file = dir.path().join(OWNER);
        let stale = match std::fs::read_to_string(&owner_file) {
            Ok(owner) => !refill::owner_alive(&owner),
            // A make writes the owner into the dir before anything else, so a dir
            // without one is either a make in its first instant (empty: `rmdir` takes
            // it only while empty, and that make then fails cleanly on its owner
            // write) or what a killed process left while making or removing an entry
            // (a removal may take the owner before the rest): removed whatever its age,
            // as the container tier's warm inits are (`warm/entry.rs`).
            Err(_) => {
                let empty = std::fs::read_dir(dir.path()).is_ok_and(|mut d| d.next().is_none());
                if empty {
                    let _ = std::fs::remove_dir(dir.path());
                    continue;
                }
                !dir.path().join(OWNER).exists()
            }
        };
        if stale {
            let handle = SandboxHandle {
                id: key,
                agent_pid: 0,
                agent_start_ticks: 0,
                agent_socket: super::agent_dir::host_socket(&dir.path()),
                state_dir: dir.path(),
                host_id_base: 0,
                warm: false,
                isolation: crate::Isolation::Gvisor,
            };
            if let Err(e) = destroy::destroy(rt, &handle) {
                tracing::warn!(%key, error = %e, "removing a dead server's warm gVisor sandbox");
            }
        }
    }
}
