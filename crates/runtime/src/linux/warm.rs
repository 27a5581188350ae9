//! Warm inits: a few sandbox inits started ahead of time, each already in a cgroup of
//! its own, its user namespace made and (for the disk size starts last asked for) its
//! writable disk mounted. A start takes one instead of paying, on its critical path,
//! for the init's exec, the RCU grace period of a first v1 cgroup move (5-10 ms here)
//! and the loop mount of the disk.
//!
//! With egress preferred, each entry is also *wired* (`net::wired`): a host side of
//! its own and the veth already in the init's network namespace.
//!
//! An entry lives in `sandboxes/.warm-<key>/` (renamed to the sandbox's state dir when
//! taken) and the cgroup `<parent>/<key>` (renamed to the sandbox's id). Its init waits
//! for `Go` and exits when we close the handshake socket, so a dead server leaves no
//! process behind; the next runtime with a pool removes what such entries left.

use super::cgroup::Cgroups;
use super::handshake::{self, Channel, Msg};
use super::net::{wired, NetConfig};
use super::start::{expect, spawn_init};
use super::{disk, refill, sys, LinuxConfig};
use crate::RuntimeError;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Name prefix of a warm entry's directory under `sandboxes/`.
const DIR_PREFIX: &str = ".warm-";

/// An init waiting for its sandbox.
pub(super) struct Warm {
    pub key: Uuid,
    pub child: Child,
    pub channel: Channel,
    pub dir: PathBuf,
    /// Size of the disk mounted at `dir/layer` (0 = none).
    pub disk_mb: u32,
    /// Whether it has an egress network (named after `key`) already.
    pub wired: bool,
}

struct Shared {
    config: LinuxConfig,
    cgroups: Cgroups,
    size: usize,
    entries: Mutex<Vec<Warm>>,
    /// Egress networking, for wired entries.
    net: Option<NetConfig>,
    /// Disk size refills are made with: the one [`WarmPool::prefer`] set, else that of
    /// the last start.
    disk_mb: AtomicU32,
    /// Whether refills are wired (only once [`WarmPool::prefer`] says so).
    wired: AtomicBool,
    preferred: AtomicBool,
    filling: AtomicBool,
    closed: AtomicBool,
}

/// The pool; dropping it ends and removes every entry.
pub(super) struct WarmPool(Arc<Shared>);

impl WarmPool {
    /// A pool of `size` entries, filled in the background once the first start says
    /// which disk size to prepare; `net` lets entries be wired.
    pub fn new(config: LinuxConfig, cgroups: Cgroups, size: usize, net: Option<NetConfig>) -> Self {
        let shared = Shared {
            config,
            cgroups,
            size,
            entries: Mutex::new(Vec::new()),
            net,
            disk_mb: AtomicU32::new(0),
            wired: AtomicBool::new(false),
            preferred: AtomicBool::new(false),
            filling: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        };
        WarmPool(Arc::new(shared))
    }

    /// Entries ready to be taken.
    pub fn ready(&self) -> usize {
        self.0.entries.lock().map_or(0, |e| e.len())
    }

    /// Takes a live entry whose disk is `disk_mb` MiB, wired or not, if there is one.
    pub fn take(&self, disk_mb: u32, wired: bool) -> Option<Warm> {
        let mut entries = self.0.entries.lock().ok()?;
        while let Some(i) = entries
            .iter()
            .position(|w| w.disk_mb == disk_mb && w.wired == wired)
        {
            let mut warm = entries.swap_remove(i);
            if matches!(warm.child.try_wait(), Ok(None)) {
                return Some(warm);
            }
            drop(entries);
            self.0.discard(warm);
            entries = self.0.entries.lock().ok()?;
        }
        None
    }

    /// Makes entries for `disk_mb`, wired when `wired` (and egress is configured), from
    /// now on, whatever starts ask for (what most will: a start of another kind starts
    /// cold and leaves the pool as it is).
    pub fn prefer(&self, disk_mb: u32, wired: bool) {
        self.0.disk_mb.store(disk_mb, Ordering::Release);
        let wired = wired && self.0.net.is_some();
        self.0.wired.store(wired, Ordering::Release);
        self.0.preferred.store(true, Ordering::Release);
        self.refill();
    }

    /// After a start of a `disk_mb` sandbox: tops the pool up on a background thread,
    /// with entries of that size unless a size is preferred (entries of another size
    /// are dropped).
    pub fn refill_after(&self, disk_mb: u32) {
        if !self.0.preferred.load(Ordering::Acquire) {
            self.0.disk_mb.store(disk_mb, Ordering::Release);
        }
        self.refill();
    }

    fn refill(&self) {
        refill::spawn(&self.0, |s| &s.filling, "warm-inits", Shared::fill);
    }

    /// Ends an entry that will not be used and removes what it made.
    pub fn discard(&self, warm: Warm) {
        self.0.discard(warm);
    }

    /// Ends and removes every entry (also run on drop).
    pub fn drain(&self) {
        self.0.closed.store(true, Ordering::Release);
        refill::wait_idle(&self.0.filling);
        let entries = match self.0.entries.lock() {
            Ok(mut e) => std::mem::take(&mut *e),
            Err(_) => return,
        };
        for warm in entries {
            self.0.discard(warm);
        }
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        self.drain();
    }
}

impl Shared {
    fn fill(&self) {
        loop {
            let want = self.disk_mb.load(Ordering::Acquire);
            let wired = self.wired.load(Ordering::Acquire);
            let stale: Vec<Warm> = match self.entries.lock() {
                Ok(mut e) => {
                    let (keep, stale) = std::mem::take(&mut *e)
                        .into_iter()
                        .partition(|w| w.disk_mb == want && w.wired == wired);
                    *e = keep;
                    if e.len() >= self.size && stale.is_empty() {
                        return;
                    }
                    stale
                }
                Err(_) => return,
            };
            for warm in stale {
                self.discard(warm);
            }
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            let warm = match self.make(want, wired) {
                Ok(warm) => warm,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot prepare a warm sandbox init");
                    return;
                }
            };
            let closed = self.closed.load(Ordering::Acquire);
            match self.entries.lock() {
                Ok(mut e) if !closed && e.len() < self.size => e.push(warm),
                _ => {
                    self.discard(warm);
                    return;
                }
            }
        }
    }

    /// Spawns an init into a fresh cgroup, waits for its user namespace, mounts its
    /// disk, and wires it when asked.
    fn make(&self, disk_mb: u32, wired: bool) -> Result<Warm, RuntimeError> {
        let key = Uuid::new_v4();
        let dir = self
            .config
            .data_dir
            .join("sandboxes")
            .join(format!("{DIR_PREFIX}{key}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(super::io("creating a warm init's dir", &dir))?;
        let owner = refill::owner_mark();
        let owner_file = dir.join("owner");
        let mut made: Option<(Child, Channel)> = None;
        let result = (|| {
            std::fs::write(&owner_file, owner)
                .map_err(super::io("writing a warm init's owner", &owner_file))?;
            let (ours, theirs) =
                handshake::pair().map_err(|e| RuntimeError::AgentStart(e.to_string()))?;
            let log = dir.join("init.log");
            let child = spawn_init(&self.config, &theirs.0, &log)?;
            drop(theirs);
            let pid = child.id() as i32;
            made = Some((child, ours));
            self.cgroups.make(key)?;
            self.cgroups.attach(key, pid)?;
            if let Some((_, ours)) = &made {
                expect(ours, &log, |m| matches!(m, Msg::UserNs).then_some(()))?;
            }
            if disk_mb > 0 {
                disk::mount_limited(&self.config.data_dir, &dir, disk_mb)?;
            }
            // The dirs every start makes (one layer: the built-in images' count); the
            // start owns the upper dir to its sandbox's root.
            for sub in ["lower/0", "rootfs", "layer/upper", "layer/work"] {
                let path = dir.join(sub);
                std::fs::create_dir_all(&path)
                    .map_err(super::io("creating a warm init's dirs", &path))?;
            }
            match (wired, &self.net) {
                (true, Some(net)) => wired::wire(net, key, pid, &dir.join("layer/upper")),
                _ => Ok(()),
            }
        })();
        match (result, made) {
            (Ok(()), Some((child, channel))) => Ok(Warm {
                key,
                child,
                channel,
                dir,
                disk_mb,
                wired,
            }),
            (result, made) => {
                if let Some((mut child, _)) = made {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                self.remove(key, &dir, wired);
                Err(result.err().unwrap_or_else(|| {
                    RuntimeError::AgentStart("the warm init was not spawned".into())
                }))
            }
        }
    }

    /// Ends an entry's init and removes its cgroup, disk and directory.
    fn discard(&self, mut warm: Warm) {
        let _ = warm.child.kill();
        let _ = warm.child.wait();
        drop(warm.channel);
        self.remove(warm.key, &warm.dir, warm.wired);
    }

    fn remove(&self, key: Uuid, dir: &Path, wired: bool) {
        remove(&self.cgroups, key, dir);
        if let (true, Some(net)) = (wired, &self.net) {
            wired::unwire(net, key);
        }
    }
}

/// Removes what entry `key` made, killing what is left in its cgroup.
fn remove(cgroups: &Cgroups, key: Uuid, dir: &Path) {
    for pid in cgroups.procs(key) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    if let Err(e) = cgroups.remove(key) {
        tracing::warn!(%key, error = %e, "removing a warm init's cgroup");
    }
    let _ = sys::detach(&disk::layer_dir(dir));
    if let Err(e) = disk::release(dir) {
        tracing::warn!(%key, error = %e, "releasing a warm init's disk");
    }
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "removing a warm init's dir");
        }
    }
}

/// Removes the entries under `data_dir` whose owning process is gone (one killed before
/// it could drain its pool); run by every runtime that opens the data dir.
pub(super) fn sweep_stale(data_dir: &Path, cgroups: &Cgroups) {
    let Ok(entries) = std::fs::read_dir(data_dir.join("sandboxes")) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(key) = name
            .strip_prefix(DIR_PREFIX)
            .and_then(|k| Uuid::parse_str(k).ok())
        else {
            continue;
        };
        let Ok(owner) = std::fs::read_to_string(entry.path().join("owner")) else {
            // Being made right now by another process, or left half-made long ago.
            let young = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() < 60);
            if !young {
                remove(cgroups, key, &entry.path());
            }
            continue;
        };
        if !refill::owner_alive(&owner) {
            remove(cgroups, key, &entry.path());
        }
    }
}
