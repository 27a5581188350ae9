//! Spare host sides of egress networks: a lease and a firewall entries with no policy
//! of their own, made in the background, so that a sandbox whose policy layers are all
//! empty (the default) takes one instead of running `nft` on its start path.
//!
//! A spare is named after an id of its own (its lease records that, so teardown finds
//! its interface and chain). Each has a marker `spares/<id>` holding its owner's PID
//! and start time; a runtime opening the network state removes spares whose owner died.

use super::host::{HostLock, Lease};
use super::policy::Policy;
use super::NetConfig;
use crate::linux::refill;
use crate::RuntimeError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

struct Shared {
    config: NetConfig,
    size: usize,
    spares: Mutex<Vec<Uuid>>,
    filling: AtomicBool,
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
        SpareNets(Arc::new(Shared {
            config,
            size,
            spares: Mutex::new(Vec::new()),
            filling: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }))
    }

    /// Hands a spare's lease (and so its chain) to sandbox `id`, if there is one.
    pub fn take(&self, id: Uuid) -> Option<Lease> {
        let spare = self.0.spares.lock().ok()?.pop()?;
        match hand_over(&self.0.config, spare, id) {
            Ok(lease) => Some(lease),
            Err(e) => {
                tracing::warn!(%spare, error = %e, "cannot hand over a spare network");
                super::teardown(&self.0.config, spare);
                None
            }
        }
    }

    /// Tops the spares up on a background thread.
    pub fn refill(&self) {
        refill::spawn(&self.0, |s| &s.filling, "spare-nets", Shared::fill);
    }

    /// Spares ready to be taken.
    pub fn ready(&self) -> usize {
        self.0.spares.lock().map_or(0, |s| s.len())
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
    fn fill(&self) {
        while !self.closed.load(Ordering::Acquire) {
            if self.spares.lock().map_or(true, |s| s.len() >= self.size) {
                return;
            }
            let id = Uuid::new_v4();
            if let Err(e) = self.make(id) {
                tracing::warn!(error = %e, "cannot prepare a spare network");
                self.remove(id);
                return;
            }
            let closed = self.closed.load(Ordering::Acquire);
            match self.spares.lock() {
                Ok(mut s) if !closed && s.len() < self.size => s.push(id),
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

    fn remove(&self, id: Uuid) {
        remove(&self.config, id);
    }
}

/// Makes a spare host side named after `id`: the marker first (so a crash mid-way is
/// swept), then lease and chain.
pub(super) fn make(config: &NetConfig, id: Uuid, policy: &Policy) -> Result<Lease, RuntimeError> {
    let path = marker(config, id);
    std::fs::create_dir_all(path.parent().unwrap_or(&config.state_dir))
        .and_then(|()| std::fs::write(&path, refill::owner_mark()))
        .map_err(|e| RuntimeError::Network(format!("recording a spare network: {e}")))?;
    super::prepare(config, id, policy)
}

/// Gives spare `spare`'s lease to sandbox `id` (its names stay the spare's) and drops
/// its marker: from now on the sandbox's destroy removes it.
pub(super) fn hand_over(config: &NetConfig, spare: Uuid, id: Uuid) -> Result<Lease, RuntimeError> {
    let lease = HostLock::take(&config.state_dir).and_then(|lock| lock.hand_over(spare, id));
    let _ = std::fs::remove_file(marker(config, spare));
    lease
}

/// Removes spare `id`'s link, chain, lease and marker.
pub(super) fn remove(config: &NetConfig, id: Uuid) {
    super::teardown(config, id);
    let _ = std::fs::remove_file(marker(config, id));
}

/// Removes the spares whose owning process is gone.
fn sweep_stale(config: &NetConfig) {
    let Ok(entries) = std::fs::read_dir(config.state_dir.join("spares")) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let Ok(id) = Uuid::parse_str(&entry.file_name().to_string_lossy()) else {
            continue;
        };
        let owner = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if !refill::owner_alive(&owner) {
            super::teardown(config, id);
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
