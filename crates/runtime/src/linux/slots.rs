//! Host id ranges: each sandbox owns a 65536-wide slot of host uids/gids. Slots are
//! leased host-wide, under one lock in `/run/sandboxd/ids` (beside the network's
//! `/run/sandboxd/net`), so no two live sandboxes of any servers on the host share one.
//!
//! A lease (`leases/<slot>`) names its owner: the data dir, the sandbox (or warm init)
//! id, and the process that took it. It stays while that process runs or while the data
//! dir still has the owner's state dir (a sandbox outlives a restart of its server);
//! once neither holds, any server may reclaim the slot. Opening a data dir re-records
//! the slots of its sandboxes (`handle.json`) and warm inits, in case `/run` was wiped.

use super::refill;
use crate::RuntimeError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use uuid::Uuid;

/// First host id of slot 0.
pub const FIRST_BASE: u32 = 0x1000_0000;
/// Ids per sandbox (uid 0..65535 inside).
pub const RANGE: u32 = 65536;
/// Slots available (keeps every base well below `u32::MAX`).
pub const MAX_SLOTS: u32 = 8192;
/// Where the leases of every sandboxd on the host live.
pub const HOST_DIR: &str = "/run/sandboxd/ids";
/// The file leases are rewritten through, beside `leases/` (see [`Locked::write`]).
const SWAP: &str = "lease.swap";

/// Who holds a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Lease {
    /// The owner's data dir (canonical).
    data_dir: PathBuf,
    /// The sandbox or warm init holding it.
    id: Uuid,
    /// The process that took it ([`refill::owner_mark`]).
    owner: String,
}

impl Lease {
    /// Whether the owner may still use the slot: its process runs, or its data dir
    /// still has its state dir (a sandbox's, or a warm init's being made or kept).
    fn live(&self) -> bool {
        let sandboxes = self.data_dir.join("sandboxes");
        refill::owner_alive(&self.owner)
            || sandboxes.join(self.id.to_string()).exists()
            || sandboxes
                .join(format!("{}{}", super::warm::DIR_PREFIX, self.id))
                .exists()
    }
}

/// The host-wide allocator, as seen by the server of one data dir.
pub struct Slots {
    dir: PathBuf,
    data_dir: PathBuf,
    next: AtomicU32,
}

/// Held while leases are read or changed.
struct Locked<'a> {
    slots: &'a Slots,
    _file: std::fs::File,
}

/// Every lease on the host ([`HOST_DIR`]), as `(data dir, holder id)`, read under the
/// writers' lock (a lease is rewritten in place of the swap file): for tools and tests
/// that check what holds a slot.
pub fn host_leases() -> Vec<(PathBuf, Uuid)> {
    let dir = Path::new(HOST_DIR);
    let Ok(_held) = super::sys::lock_exclusive(&dir.join("lock")) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir.join("leases")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .filter_map(|bytes| serde_json::from_slice::<Lease>(&bytes).ok())
        .map(|lease| (lease.data_dir, lease.id))
        .collect()
}

impl Slots {
    /// The host-wide allocator ([`HOST_DIR`]) for `data_dir`.
    pub fn new(data_dir: &Path) -> Result<Self, RuntimeError> {
        Self::open(Path::new(HOST_DIR), data_dir)
    }

    /// The allocator keeping its leases in `dir`, for `data_dir`; records the slots
    /// `data_dir`'s sandboxes and warm inits hold and reclaims dead owners' slots.
    pub fn open(dir: &Path, data_dir: &Path) -> Result<Self, RuntimeError> {
        let leases = dir.join("leases");
        std::fs::create_dir_all(&leases).map_err(|source| RuntimeError::Io {
            what: "creating the host id lease directory",
            path: leases,
            source,
        })?;
        let data_dir = data_dir
            .canonicalize()
            .unwrap_or_else(|_| data_dir.to_path_buf());
        let slots = Slots {
            dir: dir.to_path_buf(),
            data_dir,
            next: AtomicU32::new(0),
        };
        let locked = slots.lock()?;
        locked.adopt();
        locked.reclaim();
        drop(locked);
        Ok(slots)
    }

    /// Another handle on this allocator (same host dir and data dir), without the
    /// adoption and reclaim [`Slots::open`] does: those were done when this one opened.
    pub fn view(&self) -> Slots {
        Slots {
            dir: self.dir.clone(),
            data_dir: self.data_dir.clone(),
            next: AtomicU32::new(self.next.load(Ordering::Relaxed)),
        }
    }

    fn lock(&self) -> Result<Locked<'_>, RuntimeError> {
        let path = self.dir.join("lock");
        let file = super::sys::lock_exclusive(&path).map_err(|source| RuntimeError::Io {
            what: "locking the host id leases",
            path,
            source,
        })?;
        Ok(Locked {
            slots: self,
            _file: file,
        })
    }

    fn lease_path(&self, slot: u32) -> PathBuf {
        self.dir.join("leases").join(slot.to_string())
    }

    fn lease_for(&self, id: Uuid) -> Lease {
        Lease {
            data_dir: self.data_dir.clone(),
            id,
            owner: refill::owner_mark(),
        }
    }

    /// Claims a free slot for `id` and returns its host id base.
    pub fn allocate(&self, id: Uuid) -> Result<u32, RuntimeError> {
        let locked = self.lock()?;
        let slot = match locked.claim(id)? {
            Some(slot) => slot,
            // Full: free what dead owners left, then look once more.
            None => {
                locked.reclaim();
                locked.claim(id)?.ok_or(RuntimeError::IdRangesExhausted)?
            }
        };
        self.next.store(slot + 1, Ordering::Relaxed);
        Ok(FIRST_BASE + slot * RANGE)
    }

    /// Gives the slot of `base`, held by `from`, to `to`.
    pub fn hand_over(&self, base: u32, from: Uuid, to: Uuid) -> Result<(), RuntimeError> {
        let slot = slot_of(base).ok_or(RuntimeError::IdRangesExhausted)?;
        let locked = self.lock()?;
        let path = self.lease_path(slot);
        match locked.read(slot) {
            Some(lease) if lease.id == from && lease.data_dir == self.data_dir => {
                locked.write(slot, &self.lease_for(to))
            }
            _ => Err(RuntimeError::Io {
                what: "handing over a slot",
                path,
                source: std::io::Error::other(format!("the slot is not {from}'s")),
            }),
        }
    }

    /// The host id base of the slot `id` of this data dir holds, if any.
    pub fn held_by(&self, id: Uuid) -> Option<u32> {
        let locked = self.lock().ok()?;
        // The leases there are (a few), not every slot's path (8192 lookups).
        std::fs::read_dir(self.dir.join("leases"))
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|slot| *slot < MAX_SLOTS)
            .find(|slot| {
                locked
                    .read(*slot)
                    .is_some_and(|l| l.id == id && l.data_dir == self.data_dir)
            })
            .map(|slot| FIRST_BASE + slot * RANGE)
    }

    /// Frees the slot of `base` if `id` of this data dir holds it (idempotent).
    pub fn free(&self, base: u32, id: Uuid) {
        let Some(slot) = slot_of(base) else {
            return;
        };
        let Ok(locked) = self.lock() else {
            return;
        };
        if locked
            .read(slot)
            .is_some_and(|l| l.id == id && l.data_dir == self.data_dir)
        {
            let _ = std::fs::remove_file(self.lease_path(slot));
        }
    }
}

impl Locked<'_> {
    fn read(&self, slot: u32) -> Option<Lease> {
        let bytes = std::fs::read(self.slots.lease_path(slot)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes a lease whole, so a killed process never leaves a half-written one that
    /// would read as nobody's (after a power loss it may read so, as after a reboot with
    /// /run on a tmpfs: see [`super::whole_file::rename_over`]). A lease rewritten (a
    /// warm init's handed to its sandbox, on the start's way) goes through the dir's
    /// swap file (`lease.swap`): no inode made or freed (every reader holds this lock, as
    /// [`super::whole_file::replace_through`] asks).
    fn write(&self, slot: u32, lease: &Lease) -> Result<(), RuntimeError> {
        let path = self.slots.lease_path(slot);
        let spare = self.slots.dir.join(SWAP);
        let text = serde_json::to_string(lease).unwrap_or_default();
        super::whole_file::replace_through(&spare, &path, &text).map_err(|source| {
            RuntimeError::Io {
                what: "recording a host id lease",
                path,
                source,
            }
        })
    }

    /// Leases the first slot from the allocator's cursor that has no lease file.
    fn claim(&self, id: Uuid) -> Result<Option<u32>, RuntimeError> {
        let start = self.slots.next.load(Ordering::Relaxed) % MAX_SLOTS;
        for i in 0..MAX_SLOTS {
            let slot = (start + i) % MAX_SLOTS;
            if !self.slots.lease_path(slot).exists() {
                self.write(slot, &self.slots.lease_for(id))?;
                return Ok(Some(slot));
            }
        }
        Ok(None)
    }

    /// Removes every lease whose owner is gone (or that cannot be read: written by
    /// none of ours, since every write is whole).
    fn reclaim(&self) {
        let Ok(entries) = std::fs::read_dir(self.slots.dir.join("leases")) else {
            return;
        };
        for entry in entries.filter_map(|e| e.ok()) {
            let Some(slot) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if !self.read(slot).is_some_and(|lease| lease.live()) {
                tracing::info!(slot, "reclaiming a host id slot its owner left");
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Records the slots this data dir's sandboxes and warm inits hold where no lease
    /// says so (after `/run` was emptied, or from before leases were host-wide).
    fn adopt(&self) {
        let Ok(entries) = std::fs::read_dir(self.slots.data_dir.join("sandboxes")) else {
            return;
        };
        for entry in entries.filter_map(|e| e.ok()) {
            let Some((id, base)) = held_slot(&entry.path()) else {
                continue;
            };
            let Some(slot) = slot_of(base) else {
                continue;
            };
            match self.read(slot) {
                None => {
                    if let Err(e) = self.write(slot, &self.slots.lease_for(id)) {
                        tracing::warn!(%id, error = %e, "cannot record a sandbox's id slot");
                    }
                }
                Some(l) if l.id == id && l.data_dir == self.slots.data_dir => {}
                Some(l) => tracing::error!(
                    %id, slot, holder = %l.id, holder_dir = %l.data_dir.display(),
                    "a sandbox's id slot is leased to another sandbox"
                ),
            }
        }
    }
}

/// The id and slot base a state dir under `sandboxes/` holds: a started sandbox's from
/// its `handle.json`, a warm init's from its `slot` file.
fn held_slot(dir: &Path) -> Option<(Uuid, u32)> {
    let name = dir.file_name()?.to_str()?;
    if let Some(key) = name.strip_prefix(super::warm::DIR_PREFIX) {
        return Some((Uuid::parse_str(key).ok()?, super::warm::slot_base(dir)?));
    }
    let handle: crate::SandboxHandle =
        serde_json::from_slice(&std::fs::read(dir.join("handle.json")).ok()?).ok()?;
    Some((handle.id, handle.host_id_base))
}

fn slot_of(base: u32) -> Option<u32> {
    if base < FIRST_BASE || (base - FIRST_BASE) & (RANGE - 1) != 0 {
        return None;
    }
    Some((base - FIRST_BASE) / RANGE).filter(|s| *s < MAX_SLOTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let root = tempfile::tempdir().expect("tempdir");
        let host = root.path().join("ids");
        let (d1, d2) = (root.path().join("one"), root.path().join("two"));
        for d in [&d1, &d2] {
            std::fs::create_dir_all(d.join("sandboxes")).expect("data dir");
        }
        (root, host, d1, d2)
    }

    /// The host's reader (what tests check leftovers with) sees a lease taken on the
    /// host and no longer sees it once freed.
    #[test]
    fn the_host_reader_sees_a_lease_while_it_is_held() {
        let data = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(data.path().join("sandboxes")).expect("data dir");
        let slots = Slots::new(data.path()).expect("host slots");
        let id = Uuid::new_v4();
        let base = slots.allocate(id).expect("lease");
        let held = |id| {
            host_leases()
                .iter()
                .any(|(d, i)| *i == id && *d == slots.data_dir)
        };
        assert!(held(id), "the lease was not read");
        slots.free(base, id);
        assert!(!held(id), "a freed lease was read");
    }

    #[test]
    fn a_view_shares_the_leases_and_reclaims_nothing_on_its_way() {
        let (_root, host, data, _) = dirs();
        let slots = Slots::open(&host, &data).expect("slots");
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let base_a = slots.view().allocate(a).expect("a through a view");
        let base_b = slots.allocate(b).expect("b");
        assert_ne!(base_a, base_b, "the view's lease is the allocator's too");
        assert_eq!(
            slots.held_by(a),
            Some(base_a),
            "the view leased for this data dir"
        );
        // A lease whose owner is gone (no process, no state dir): a view leaves it,
        // opening the allocator anew reclaims it.
        let dead = Lease {
            data_dir: slots.data_dir.clone(),
            id: Uuid::new_v4(),
            owner: "0 0".into(),
        };
        let lease = host.join("leases/7");
        std::fs::write(&lease, serde_json::to_vec(&dead).unwrap()).expect("dead lease");
        let _view = slots.view();
        assert!(lease.exists(), "a view reclaimed a lease");
        let _opened = Slots::open(&host, &data).expect("reopen");
        assert!(
            !lease.exists(),
            "opening did not reclaim the dead owner's lease"
        );
        slots.free(base_a, a);
        slots.free(base_b, b);
        assert_eq!((slots.held_by(a), slots.held_by(b)), (None, None));
        assert_eq!(std::fs::read_dir(host.join("leases")).unwrap().count(), 0);
    }

    #[test]
    fn slots_are_distinct_and_survive_a_new_allocator() {
        let (_root, host, data, _) = dirs();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let open = || Slots::open(&host, &data).expect("slots");
        let base_a = open().allocate(a).expect("a");
        let base_b = open().allocate(b).expect("b");
        assert_ne!(base_a, base_b);
        assert_eq!((base_a - FIRST_BASE) % RANGE, 0);
        let slots = open();
        let lease = host.join("leases/0");
        slots.free(base_a, b); // not the owner: kept
        assert!(lease.exists());
        let c = Uuid::new_v4();
        assert!(slots.hand_over(base_a, b, c).is_err(), "b does not hold it");
        slots.hand_over(base_a, a, c).expect("a hands it to c");
        slots.free(base_a, a); // no longer the owner: kept
        assert!(lease.exists());
        slots.free(base_a, c);
        assert!(!lease.exists());
    }

    #[test]
    fn two_data_dirs_never_share_a_slot_nor_free_each_others() {
        let (_root, host, d1, d2) = dirs();
        let one = Slots::open(&host, &d1).expect("one");
        let two = Slots::open(&host, &d2).expect("two");
        let mut bases = Vec::new();
        for _ in 0..4 {
            bases.push(one.allocate(Uuid::new_v4()).expect("one"));
            bases.push(two.allocate(Uuid::new_v4()).expect("two"));
        }
        let mut unique = bases.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), bases.len(), "shared slots: {bases:?}");
        // Same id in another data dir: not its lease.
        let id = Uuid::new_v4();
        let base = one.allocate(id).expect("id");
        two.free(base, id);
        assert!(two.hand_over(base, id, Uuid::new_v4()).is_err());
        assert_ne!(two.allocate(Uuid::new_v4()).expect("next"), base);
    }

    #[test]
    fn dead_owners_are_reclaimed_and_live_sandboxes_kept() {
        let (_root, host, d1, d2) = dirs();
        let (dead, kept) = (Uuid::new_v4(), Uuid::new_v4());
        let dead_lease = Lease {
            data_dir: d1.canonicalize().expect("canon"),
            id: dead,
            owner: "999999999 1".into(),
        };
        let kept_lease = Lease {
            id: kept,
            ..dead_lease.clone()
        };
        std::fs::create_dir_all(host.join("leases")).expect("leases");
        std::fs::write(
            host.join("leases/0"),
            serde_json::to_vec(&dead_lease).unwrap(),
        )
        .expect("dead");
        std::fs::write(
            host.join("leases/1"),
            serde_json::to_vec(&kept_lease).unwrap(),
        )
        .expect("kept");
        std::fs::write(host.join("leases/2"), b"torn").expect("junk");
        // The kept one's sandbox dir is still there (its server restarted).
        std::fs::create_dir_all(d1.join("sandboxes").join(kept.to_string())).expect("dir");
        let two = Slots::open(&host, &d2).expect("two");
        assert!(
            !host.join("leases/0").exists(),
            "dead owner's slot reclaimed"
        );
        assert!(
            !host.join("leases/2").exists(),
            "unreadable lease reclaimed"
        );
        assert!(host.join("leases/1").exists(), "live sandbox's slot kept");
        let base = two.allocate(Uuid::new_v4()).expect("alloc");
        assert_ne!(base, FIRST_BASE + RANGE);
    }

    #[test]
    fn opening_a_data_dir_records_its_sandboxes_slots() {
        let (_root, host, d1, d2) = dirs();
        let id = Uuid::new_v4();
        let base = FIRST_BASE + 5 * RANGE;
        let state = d1.join("sandboxes").join(id.to_string());
        std::fs::create_dir_all(&state).expect("state");
        let handle = crate::SandboxHandle {
            id,
            agent_pid: 0,
            agent_start_ticks: 0,
            agent_socket: state.join("agent.sock"),
            state_dir: state.clone(),
            host_id_base: base,
            warm: false,
            isolation: Default::default(),
        };
        std::fs::write(
            state.join("handle.json"),
            serde_json::to_vec(&handle).unwrap(),
        )
        .expect("handle");
        let _one = Slots::open(&host, &d1).expect("one");
        let two = Slots::open(&host, &d2).expect("two");
        two.next.store(5, Ordering::Relaxed);
        assert_ne!(two.allocate(Uuid::new_v4()).expect("alloc"), base);
    }
}
