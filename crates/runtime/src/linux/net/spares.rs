//! Spare host sides of egress networks: a lease and a firewall entries with no policy
//! of their own, made in the background, so that a sandbox whose policy layers are all
//! empty (the default) takes one instead of running `nft` on its start path.
//!
//! A spare is named after an id of its own (its lease records that, so teardown finds
//! its interface and chain). Each has a marker `spares/<id>` holding its owner's PID
//! and start time; a runtime opening the network state removes spares whose owner died.
//!
//! A one-shot process (`sandboxd run`) beside a server may [`claim`] one of the
//! server's spares once it is made (its marker then says [`CLAIMABLE`]). Whoever hands
//! its lease over and removes its marker under the host lock owns the spare: the pool
//! skips a spare whose marker is gone, and never removes it. A marker goes only once its
//! network is torn down (or handed over): never a lease that no marker names.

use super::host::{HostLock, Lease};
use super::policy::Policy;
use super::NetConfig;
use crate::linux::{refill, whole_file};
use crate::RuntimeError;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// The marker's word for a finished spare of a pool, which another process may claim.
const CLAIMABLE: &str = "claimable";

struct Shared {
    config: NetConfig,
    size: usize,
    spares: Mutex<Vec<Uuid>>,
    filling: AtomicBool,
    /// Whether a refill was ever asked for (the periodic tick refills only then).
    started: AtomicBool,
    closed: AtomicBool,
}

/// The spares of one runtime; dropping it removes them.
pub(in crate::linux) struct SpareNets(Arc<Shared>);

fn marker(config: &NetConfig, id: Uuid) -> PathBuf {
    config.state_dir.join("spares").join(id.to_string())
}

impl SpareNets {
    /// Keeps `size` spares (made from the first refill on); removes dead owners' spares.
    pub fn new(config: NetConfig, size: usize) -> Self {
        sweep_stale(&config);
        let shared = Arc::new(Shared {
            config,
            size,
            spares: Mutex::new(Vec::new()),
            filling: AtomicBool::new(false),
            started: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        // A spare another process claimed is made again with no look at the count.
        refill::spawn_tick(
            Arc::downgrade(&shared),
            "spare-nets-tick",
            |s| &s.closed,
            Shared::due,
            Shared::refill,
        );
        SpareNets(shared)
    }

    /// Hands a spare's lease (and so its chain) to sandbox `id`, kept by its state dir
    /// `keeper`, if there is one (not claimed by another process meanwhile).
    pub fn take(&self, id: Uuid, keeper: &Path) -> Option<Lease> {
        loop {
            let spare = self.0.spares.lock().ok()?.pop()?;
            match take_own(&self.0.config, spare, id, keeper) {
                Ok(Some(lease)) => return Some(lease),
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(%spare, error = %e, "cannot hand over a spare network");
                    // Made unclaimable under the host lock first: no run claims it
                    // while it is torn down.
                    self.0.remove(spare);
                    return None;
                }
            }
        }
    }

    /// Tops the spares up on a background thread.
    pub fn refill(&self) {
        self.0.started.store(true, Ordering::Release);
        Shared::refill(&self.0);
    }

    /// Spares ready to be taken (not claimed by another process); one claimed since
    /// the last look starts a refill.
    pub fn ready(&self) -> usize {
        let (ready, claimed) = self.0.unclaimed();
        if claimed > 0 {
            self.refill();
        }
        ready
    }

    /// Removes every spare (also run on drop).
    pub fn drain(&self) {
        self.0.closed.store(true, Ordering::Release);
        refill::wait_idle(&self.0.filling);
        let spares = match self.0.spares.lock() {
            Ok(mut s) => std::mem::take(&mut *s),
            Err(_) => return,
        };
        for spare in spares {
            self.0.remove(spare);
        }
    }
}

impl Drop for SpareNets {
    fn drop(&mut self) {
        self.drain();
    }
}

impl Shared {
    fn refill(shared: &Arc<Shared>) {
        refill::spawn(shared, |s| &s.filling, "spare-nets", Shared::fill);
    }

    /// For the periodic tick: whether spares, once made, are missing (claimed by
    /// another process, or a refill gave up) with no refill under way.
    fn due(&self) -> bool {
        self.started.load(Ordering::Acquire)
            && !self.filling.load(Ordering::Acquire)
            && self.unclaimed().0 < self.size
    }

    /// Forgets the spares another process claimed (their markers gone: see [`claim`]):
    /// how many are left, and how many went.
    fn unclaimed(&self) -> (usize, usize) {
        let Ok(mut spares) = self.spares.lock() else {
            return (0, 0);
        };
        let before = spares.len();
        spares.retain(|id| marker(&self.config, *id).exists());
        (spares.len(), before - spares.len())
    }

    fn fill(&self) {
        let mut failures = 0;
        while !self.closed.load(Ordering::Acquire) {
            if self.unclaimed().0 >= self.size {
                return;
            }
            let id = Uuid::new_v4();
            if let Err(e) = self.make(id) {
                tracing::warn!(error = %e, "cannot prepare a spare network");
                self.remove(id);
                failures += 1;
                match refill::retry_after_failure(failures, &self.closed, "spare networks") {
                    true => continue,
                    false => return,
                }
            }
            failures = 0;
            let closed = self.closed.load(Ordering::Acquire);
            match self.spares.lock() {
                Ok(mut s) if !closed && s.len() < self.size => {
                    s.push(id);
                    mark_claimable(&self.config, id);
                }
                _ => {
                    self.remove(id);
                    return;
                }
            }
        }
    }

    fn make(&self, id: Uuid) -> Result<(), RuntimeError> {
        make(&self.config, id, &Policy::default()).map(|_| ())
    }

    /// Removes spare `id` unless another process claimed it. Its marker is made
    /// unclaimable (under the host lock) before the teardown and removed only after
    /// it: a process killed in between leaves a marker of a dead owner, which the next
    /// sweep removes with the lease, never a lease no marker names.
    fn remove(&self, id: Uuid) {
        let path = marker(&self.config, id);
        let ours = HostLock::take(&self.config.state_dir).is_ok_and(|_lock| {
            path.exists() && whole_file::replace(&path, &refill::owner_mark()).is_ok()
        });
        if ours && super::teardown(&self.config, id) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Marks spare `id` of this process's pool as one another process may [`claim`].
fn mark_claimable(config: &NetConfig, id: Uuid) {
    let mark = format!("{} {CLAIMABLE}", refill::owner_mark());
    // Replaced whole: a sweep reading it meanwhile finds the old mark or the new one.
    if let Err(e) = whole_file::replace(&marker(config, id), &mark) {
        tracing::debug!(%id, error = %e, "marking a spare network claimable");
    }
}

/// Spare `spare` of this process's pool for sandbox `id`, under the host lock: `None`
/// when another process claimed it (its marker is gone).
fn take_own(
    config: &NetConfig,
    spare: Uuid,
    id: Uuid,
    keeper: &Path,
) -> Result<Option<Lease>, RuntimeError> {
    let lock = HostLock::take(&config.state_dir)?;
    let path = marker(config, spare);
    if !path.exists() {
        return Ok(None);
    }
    // Handed over first: a process killed between the two leaves a marker whose lease
    // is gone (swept), never a lease that no marker names.
    let lease = lock.hand_over(spare, id, Some(keeper))?;
    let _ = std::fs::remove_file(path);
    Ok(Some(lease))
}

/// Hands a finished spare of another live process's pool (a server's, beside a
/// one-shot run) to sandbox `id`, kept by its state dir `keeper`, if there is one: no
/// network setup on this start.
pub(super) fn claim(config: &NetConfig, id: Uuid, keeper: &Path) -> Option<Lease> {
    let lock = HostLock::take(&config.state_dir).ok()?;
    let entries = std::fs::read_dir(config.state_dir.join("spares")).ok()?;
    for entry in entries.filter_map(|e| e.ok()) {
        let Ok(spare) = Uuid::parse_str(&entry.file_name().to_string_lossy()) else {
            continue;
        };
        let mark = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let claimable = mark.split_whitespace().any(|w| w == CLAIMABLE);
        if !claimable || !refill::owner_alive(&mark) {
            continue;
        }
        // Handed over, then its marker removed, under the host lock: from now on its
        // pool does not count it as its own. One that cannot be handed over is left to
        // its pool.
        match lock.hand_over(spare, id, Some(keeper)) {
            Ok(lease) => {
                let _ = std::fs::remove_file(entry.path());
                return Some(lease);
            }
            Err(e) => {
                tracing::warn!(%spare, error = %e, "a claimable spare network without its lease")
            }
        }
    }
    None
}

/// Makes a spare host side named after `id`: the marker first (so a crash mid-way is
/// swept; written whole, so that a sweep never reads it empty and takes a live
/// process's spare for a dead one's), then lease and chain.
pub(super) fn make(config: &NetConfig, id: Uuid, policy: &Policy) -> Result<Lease, RuntimeError> {
    let path = marker(config, id);
    std::fs::create_dir_all(path.parent().unwrap_or(&config.state_dir))
        .and_then(|()| whole_file::create(&path, &refill::owner_mark()))
        .map_err(|e| RuntimeError::Network(format!("recording a spare network: {e}")))?;
    super::prepare(config, id, policy, None)
}

/// Gives spare `spare`'s lease to sandbox `id`, kept by its state dir `keeper` (its
/// names stay the spare's) and drops its marker: from now on the sandbox's destroy
/// removes it.
pub(super) fn hand_over(
    config: &NetConfig,
    spare: Uuid,
    id: Uuid,
    keeper: &Path,
) -> Result<Lease, RuntimeError> {
    let lease =
        HostLock::take(&config.state_dir).and_then(|lock| lock.hand_over(spare, id, Some(keeper)));
    let _ = std::fs::remove_file(marker(config, spare));
    lease
}

/// Removes spare `id`'s link, chain, lease and marker.
pub(super) fn remove(config: &NetConfig, id: Uuid) {
    if super::teardown(config, id) {
        let _ = std::fs::remove_file(marker(config, id));
    }
}

/// Removes the spares whose owning process is gone.
fn sweep_stale(config: &NetConfig) {
    let Ok(entries) = std::fs::read_dir(config.state_dir.join("spares")) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if whole_file::is_temp_name(&name) {
            // A replacement's temporary name, left by a process killed between its link
            // and its rename or exchange (a live one's, taken here, only leaves its mark
            // as it was).
            let _ = std::fs::remove_file(entry.path());
            continue;
        }
        let Ok(id) = Uuid::parse_str(&name) else {
            continue;
        };
        let owner = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if !refill::owner_alive(&owner) && super::teardown(config, id) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
