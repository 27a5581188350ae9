//! Host-wide network state shared by every sandboxd on the host, under one lock in
//! `/run/sandboxd/net`: address leases, the shared nftables table and `ip_forward`.

use crate::linux::{refill, whole_file};
use crate::{Cidr, RuntimeError};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use uuid::Uuid;

const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";
/// The file leases are rewritten through, beside `leases/` (see
/// [`whole_file::replace_through`]).
const SWAP: &str = "lease.swap";

/// A sandbox's /30: host end `.1`, sandbox `.2`, plus how many allow sets its chain has
/// and whose id its interface and chain are named after (a spare's, when it was made
/// ahead of its sandbox; `None` in leases written before spares: the sandbox's own),
/// and whether its chain was made under no policy at all (`plain`: no deny or allow
/// entries, so another sandbox without a policy can take it over as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub net: Cidr,
    pub allow_layers: usize,
    pub named_after: Option<Uuid>,
    pub plain: bool,
}

impl Lease {
    pub fn host(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.net.network()) + 1)
    }
    pub fn sandbox(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.net.network()) + 2)
    }
}

/// Held while changing host network state (an exclusive `flock`).
pub struct HostLock {
    dir: PathBuf,
    _file: std::fs::File,
}

fn net_err(what: &str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Network(format!("{what}: {e}"))
}

/// An exclusive `flock` on `dir/name`, held while the file is open.
fn flock(dir: &Path, name: &str) -> Result<std::fs::File, RuntimeError> {
    std::fs::create_dir_all(dir.join("leases"))
        .map_err(|e| net_err("creating the network state dir", e))?;
    crate::linux::sys::lock_exclusive(&dir.join(name))
        .map_err(|e| net_err("locking the network state", e))
}

/// Held while a sandbox's set elements are added to or removed from the shared table
/// (a removal reads the sets before its commit, and two changes at once would
/// interleave). Separate from [`HostLock`], so that handing a lease over
/// does not wait for another sandbox's elements.
pub struct RulesLock(#[allow(dead_code)] std::fs::File);

impl RulesLock {
    pub fn take(dir: &Path) -> Result<Self, RuntimeError> {
        flock(dir, "rules.lock").map(RulesLock)
    }
}

impl HostLock {
    pub fn take(dir: &Path) -> Result<Self, RuntimeError> {
        Ok(HostLock {
            dir: dir.to_path_buf(),
            _file: flock(dir, "lock")?,
        })
    }

    /// [`HostLock::take`] for one who must not make the state dir again once it is
    /// gone (a reaper outliving the state it reaps, e.g. a test's temporary dir, made
    /// it again with `leases/` and `lock` and left it): `None` when `dir` is gone.
    pub fn take_existing(dir: &Path) -> Result<Option<Self>, RuntimeError> {
        match crate::linux::sys::lock_exclusive(&dir.join("lock")) {
            Ok(file) => Ok(Some(HostLock {
                dir: dir.to_path_buf(),
                _file: file,
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(net_err("locking the network state", e)),
        }
    }

    fn lease_path(&self, id: Uuid) -> PathBuf {
        self.dir.join("leases").join(id.to_string())
    }

    fn leases(&self) -> Vec<Lease> {
        self.lease_files()
            .into_iter()
            .map(|(_, lease)| lease)
            .collect()
    }

    /// The lease files with their leases. Every lease is written whole under this lock,
    /// so a file that does not parse, or a temporary name, is what a writer killed
    /// mid-write left (an empty file, from versions that wrote leases in place): it is
    /// removed here, never counted, and never kept forever by a teardown that cannot
    /// read it.
    fn lease_files(&self) -> Vec<(String, Lease)> {
        let Ok(entries) = std::fs::read_dir(self.dir.join("leases")) else {
            return Vec::new();
        };
        let mut files = Vec::new();
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            match parse_lease(&text) {
                Some(lease) if !whole_file::is_temp_name(&name) => files.push((name, lease)),
                _ => {
                    tracing::debug!(%name, "removing a lease file left half-written");
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        files
    }

    /// The pool slot the next allocation starts its search at (persisted beside the
    /// leases, read and written under this lock).
    fn next_slot(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("next"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The lease of `id`, if it has one.
    pub fn lease(&self, id: Uuid) -> Option<Lease> {
        parse_lease(&std::fs::read_to_string(self.lease_path(id)).ok()?)
    }

    /// The sandboxes whose leases nothing keeps any more: the process that made or
    /// took the lease is dead, and the sandbox's state dir it named is gone (its start
    /// failed, or its data dir was removed since). A sandbox outliving its server keeps
    /// its state dir, and so its lease; leases naming no keeper (a spare's or a parked
    /// network's, which their own markers keep, or an earlier version's) are never
    /// strays.
    pub fn strays(&self) -> Vec<Uuid> {
        self.lease_files()
            .into_iter()
            .filter_map(|(name, _)| {
                let id = Uuid::parse_str(&name).ok()?;
                self.is_stray(id).then_some(id)
            })
            .collect()
    }

    /// Whether `id`'s lease is a stray (see [`HostLock::strays`]). A keeper that
    /// cannot be looked at (relative, or an error other than its absence) keeps it.
    fn is_stray(&self, id: Uuid) -> bool {
        let Ok(text) = std::fs::read_to_string(self.lease_path(id)) else {
            return false;
        };
        let Some((owner, keeper)) = parse_keeper(&text) else {
            return false;
        };
        let gone = keeper.is_absolute() && keeper.try_exists().is_ok_and(|there| !there);
        gone && !refill::owner_alive(owner)
    }

    /// Takes stray `id`'s lease under a name of its own (returned) for this process to
    /// tear down, still naming the gone keeper (a teardown killed midway leaves a stray
    /// again): a destroy or park of `id` by another process meanwhile finds no lease
    /// and leaves it alone. `None` when it is no stray any more.
    pub fn claim_stray(&self, id: Uuid) -> Option<Uuid> {
        if !self.is_stray(id) {
            return None;
        }
        let text = std::fs::read_to_string(self.lease_path(id)).ok()?;
        let keeper = parse_keeper(&text).map(|(_, keeper)| keeper.to_path_buf())?;
        let claim = Uuid::new_v4();
        self.hand_over(id, claim, Some(&keeper)).ok()?;
        Some(claim)
    }

    /// Claims the next /30 of `pool` (round-robin) no sandbox holds, for a chain with `allow_layers`
    /// allow sets (`plain`: made under no policy). `keeper`: the state dir of the
    /// sandbox it is for (none for a spare), recorded with this process as the lease's
    /// owner (see [`HostLock::strays`]).
    pub fn allocate(
        &self,
        id: Uuid,
        pool: Cidr,
        allow_layers: usize,
        plain: bool,
        keeper: Option<&Path>,
    ) -> Result<Lease, RuntimeError> {
        let taken: Vec<Ipv4Addr> = self.leases().iter().map(|l| l.net.network()).collect();
        let first = u32::from(pool.network());
        let count = 1u64 << (32 - u32::from(pool.prefix.min(30))) >> 2;
        // Round-robin from the /30 after the last one handed out, so a freed address
        // (whose old flows the host's conntrack may still hold) comes back only after
        // the whole pool has been used.
        let start = self.next_slot() % count;
        let slot = (0..count)
            .map(|i| (start + i) % count)
            .find(|i| !taken.contains(&Ipv4Addr::from(first + (*i as u32) * 4)));
        let slot =
            slot.ok_or_else(|| RuntimeError::Network(format!("no free /30 left in {pool}")))?;
        let addr = Ipv4Addr::from(first + (slot as u32) * 4);
        std::fs::write(self.dir.join("next"), ((slot + 1) % count).to_string())
            .map_err(|e| net_err("recording the next lease", e))?;
        let lease = Lease {
            net: Cidr { addr, prefix: 30 },
            allow_layers,
            named_after: Some(id),
            plain,
        };
        let plain = if plain { " plain" } else { "" };
        let line = format!("{} {} {id}{plain}", lease.net, allow_layers);
        whole_file::replace(&self.lease_path(id), &with_keeper(line, keeper))
            .map_err(|e| net_err("recording a lease", e))?;
        Ok(lease)
    }

    /// Gives the lease of `from` (a spare, a parked network) to `to`; its names stay
    /// `from`'s. `keeper`: the state dir of sandbox `to`, recorded with this process as
    /// the owner (none when `to` is a parked network's name).
    pub fn hand_over(
        &self,
        from: Uuid,
        to: Uuid,
        keeper: Option<&Path>,
    ) -> Result<Lease, RuntimeError> {
        let lease = self
            .lease(from)
            .ok_or_else(|| RuntimeError::Network(format!("spare network {from} has no lease")))?;
        // Rewritten in place first, then renamed: a failure leaves the lease where it
        // was, and a crash between the two leaves one lease naming its new keeper.
        let path = self.lease_path(from);
        let text = std::fs::read_to_string(&path).map_err(|e| net_err("reading a lease", e))?;
        let line = text.lines().next().unwrap_or_default().to_owned();
        // Through the swap file (no inode made or freed on a warm start's way): every reader
        // of a lease holds this lock.
        whole_file::replace_through(&self.dir.join(SWAP), &path, &with_keeper(line, keeper))
            .map_err(|e| net_err("recording a lease", e))?;
        std::fs::rename(&path, self.lease_path(to))
            .map_err(|e| net_err("handing over a lease", e))?;
        Ok(lease)
    }

    /// Records that `id`'s chain now has `allow_layers` allow sets (and a policy: no
    /// longer plain).
    pub fn set_allow_layers(&self, id: Uuid, allow_layers: usize) -> Result<(), RuntimeError> {
        let lease = self
            .lease(id)
            .ok_or_else(|| RuntimeError::Network(format!("sandbox {id} has no lease")))?;
        let named_after = lease.named_after.unwrap_or(id);
        let path = self.lease_path(id);
        let text = std::fs::read_to_string(&path).map_err(|e| net_err("reading a lease", e))?;
        // The first line anew; its owner and keeper as they were.
        let rest = text.find('\n').map_or("", |at| &text[at..]);
        let text = format!("{} {allow_layers} {named_after}{rest}", lease.net);
        whole_file::replace(&path, &text).map_err(|e| net_err("recording a lease", e))
    }

    pub fn release(&self, id: Uuid) {
        let _ = std::fs::remove_file(self.lease_path(id));
    }

    /// Whether the shared table must be made: no lease exists (the table is only
    /// there while one does, so whatever a crash left is replaced; no look at the
    /// ruleset).
    pub fn table_missing(&self) -> bool {
        self.leases().is_empty()
    }

    /// Whether `id` holds the only lease on the host (so the table goes with it).
    pub fn only_lease(&self, id: Uuid) -> bool {
        let files = self.lease_files();
        files.len() == 1 && files[0].0 == id.to_string()
    }

    /// Makes the shared table (its sets and chains; no sandbox's elements), turning
    /// `ip_forward` on (and remembering that we did, so the table drops unrelated
    /// forwarding) when it was off. Only while no lease but the caller's exists (see
    /// [`HostLock::table_missing`]): no one else changes the table meanwhile.
    pub fn make_table(&self) -> Result<(), RuntimeError> {
        let marker = self.dir.join("forward-enabled");
        let on = std::fs::read_to_string(IP_FORWARD)
            .map_err(|e| net_err("reading ip_forward", e))?
            .trim()
            == "1";
        if !on {
            std::fs::write(&marker, "").map_err(|e| net_err("recording ip_forward", e))?;
        }
        // In-process, one transaction that also replaces a table a crash left.
        super::nftable::make(marker.exists())
            .map_err(|e| net_err("making the shared nftables table", e))?;
        if !on {
            std::fs::write(IP_FORWARD, "1").map_err(|e| net_err("enabling ip_forward", e))?;
        }
        Ok(())
    }

    /// Once no sandbox holds a lease: deletes the table and turns `ip_forward` back off
    /// if sandboxd turned it on.
    pub fn tidy_if_unused(&self) {
        if !self.leases().is_empty() {
            return;
        }
        if let Err(e) = super::nfset::delete_table() {
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::warn!(error = %e, "deleting the shared nftables table");
            }
        }
        let marker = self.dir.join("forward-enabled");
        if marker.exists() && std::fs::write(IP_FORWARD, "0").is_ok() {
            let _ = std::fs::remove_file(marker);
        }
    }
}

/// A lease's text: its first `line`, then, for a sandbox's, this process's owner mark
/// and the sandbox's state dir (last, to the end: a path may hold spaces).
/// A keeper whose path is no UTF-8 is not recorded (it could not be read back as the
/// same path, and would read as gone).
fn with_keeper(line: String, keeper: Option<&Path>) -> String {
    match keeper.and_then(Path::to_str) {
        Some(dir) => format!("{line}\nowner {}\nkeeper {dir}", refill::owner_mark()),
        None => line,
    }
}

/// The owner mark and state dir a sandbox's lease records, if it does.
fn parse_keeper(text: &str) -> Option<(&str, &Path)> {
    let mut lines = text.lines().skip(1);
    let owner = lines.next()?.strip_prefix("owner ")?;
    let rest = &text[text.find("\nkeeper ")? + "\nkeeper ".len()..];
    Some((owner, Path::new(rest.strip_suffix('\n').unwrap_or(rest))))
}

fn parse_lease(text: &str) -> Option<Lease> {
    let mut fields = text.lines().next()?.split_whitespace();
    let (net, layers) = (fields.next()?, fields.next()?);
    let named_after = match fields.next() {
        Some(id) => Some(Uuid::parse_str(id).ok()?),
        None => None,
    };
    Some(Lease {
        net: net.parse().ok()?,
        allow_layers: layers.parse().ok()?,
        named_after,
        plain: fields.next() == Some("plain"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_taken_only_if_its_dir_exists_never_makes_the_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        let gone = dir.path().join("state");
        assert!(HostLock::take_existing(&gone).expect("no error").is_none());
        assert!(!gone.exists(), "the state dir was made again");
        std::fs::create_dir(&gone).expect("state dir");
        assert!(HostLock::take_existing(&gone).expect("lock").is_some());
    }

    #[test]
    fn leases_allocate_distinct_slash30s_and_free() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lock = HostLock::take(dir.path()).expect("lock");
        let pool: Cidr = "10.213.0.0/29".parse().expect("pool");
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let la = lock.allocate(a, pool, 1, false, None).expect("a");
        let lb = lock.allocate(b, pool, 0, true, None).expect("b");
        assert!(!la.plain && lb.plain);
        assert_eq!(
            (la.host(), la.sandbox()),
            (Ipv4Addr::new(10, 213, 0, 1), Ipv4Addr::new(10, 213, 0, 2))
        );
        assert_eq!(lb.net.to_string(), "10.213.0.4/30");
        assert_eq!(lock.lease(a), Some(la));
        assert_eq!(lock.lease(b), Some(lb));
        assert!(
            lock.allocate(Uuid::new_v4(), pool, 0, true, None).is_err(),
            "the pool holds two"
        );
        lock.release(a);
        assert_eq!(
            lock.allocate(Uuid::new_v4(), pool, 0, true, None)
                .expect("reuse")
                .net,
            la.net
        );
    }

    /// A lease file a writer killed mid-write left (empty, as versions that wrote leases
    /// in place could leave; or a whole-file temporary name) takes no address, does not
    /// keep the table, and is removed: it once stayed forever, as no teardown could
    /// read it.
    #[test]
    fn half_written_lease_files_take_nothing_and_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lock = HostLock::take(dir.path()).expect("lock");
        let leases = dir.path().join("leases");
        std::fs::create_dir_all(&leases).expect("leases dir");
        let empty = Uuid::new_v4();
        std::fs::write(leases.join(empty.to_string()), "").expect("empty lease");
        let pool: Cidr = "10.213.0.0/30".parse().expect("pool");
        let temp = leases.join(".whole-old-1-2.tmp");
        std::fs::write(&temp, format!("10.213.0.0/30 0 {empty}")).expect("temp lease");
        assert!(lock.table_missing(), "junk counted as a lease");
        // The pool's one /30 is free: neither file holds it.
        let id = Uuid::new_v4();
        assert_eq!(
            lock.allocate(id, pool, 0, true, None)
                .expect("the one /30")
                .net
                .addr,
            pool.addr
        );
        assert!(!leases.join(empty.to_string()).exists() && !temp.exists());
        assert!(lock.only_lease(id));
        lock.set_allow_layers(id, 2).expect("rewritten whole");
        assert_eq!(lock.lease(id).expect("lease").allow_layers, 2);
        let names: Vec<_> = std::fs::read_dir(&leases)
            .expect("leases")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(id.to_string())]);
    }

    /// A sandbox's lease names its maker and state dir; it is a stray only once both
    /// are gone. A spare's or a parked network's (no keeper) never is, nor is one whose
    /// keeper is relative (it cannot be looked at from here).
    #[test]
    fn a_lease_is_a_stray_only_when_its_owner_and_state_dir_are_both_gone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lock = HostLock::take(dir.path()).expect("lock");
        let pool: Cidr = "10.213.0.0/26".parse().expect("pool");
        let gone = dir.path().join("data/sandboxes/gone");
        let kept = dir.path().join("data/sandboxes/kept");
        std::fs::create_dir_all(&kept).expect("kept state dir");
        let ids: Vec<Uuid> = (0..6).map(|_| Uuid::new_v4()).collect();
        let keepers = [Some(&gone), Some(&kept), None, Some(&gone), Some(&kept)];
        for (id, keeper) in ids.iter().zip(keepers) {
            lock.allocate(*id, pool, 0, true, keeper.map(|p| p.as_path()))
                .expect("allocate");
        }
        assert!(lock.strays().is_empty(), "this process owns them all");
        // What a killed maker leaves: the same leases, naming a process that is gone.
        let dead = |id: Uuid, keeper: &str| {
            let text = format!("10.213.0.0/30 0 {id} plain\nowner 999999999 1\nkeeper {keeper}");
            std::fs::write(lock.lease_path(id), text).expect("rewrite");
        };
        dead(ids[0], &gone.display().to_string());
        dead(ids[1], &kept.display().to_string());
        dead(ids[5], "data/sandboxes/gone");
        // ids[2]: no keeper; ids[3], ids[4]: owner alive.
        assert_eq!(lock.strays(), vec![ids[0]]);
        // Claimed under a name of its own: the old name holds nothing any more (a
        // destroy or park of it elsewhere finds no lease), the address is still held.
        let net = lock.lease(ids[0]).expect("still a lease").net;
        let claim = lock.claim_stray(ids[0]).expect("claimed");
        assert_eq!(lock.lease(ids[0]), None);
        assert_eq!(lock.lease(claim).expect("the claim's").net, net);
        assert_eq!(lock.claim_stray(ids[0]), None, "claimed twice");
        assert!(lock.strays().is_empty(), "the claimer is alive");
        // A hand-over to a parked name drops the keeper; one to a sandbox records this
        // process and the new state dir; a policy change keeps them.
        let parked = Uuid::new_v4();
        dead(ids[4], &gone.display().to_string());
        lock.hand_over(ids[4], parked, None).expect("park");
        let mut strays = lock.strays();
        assert!(strays.is_empty(), "{strays:?}");
        let taker = Uuid::new_v4();
        lock.hand_over(ids[1], taker, Some(&gone)).expect("take");
        lock.set_allow_layers(taker, 1).expect("policy");
        assert_eq!(lock.lease(taker).expect("lease").allow_layers, 1);
        dead(ids[3], &gone.display().to_string());
        strays = lock.strays();
        assert_eq!(
            strays,
            vec![ids[3]],
            "the taker's is kept by its live owner"
        );
        let text = std::fs::read_to_string(lock.lease_path(taker)).expect("taker's");
        let (owner, keeper) = parse_keeper(&text).expect("keeper recorded");
        assert_eq!(
            (owner, keeper),
            (refill::owner_mark().as_str(), gone.as_path())
        );
    }

    /// A freed /30 is not handed out again while another one is free (its old flows'
    /// conntrack entries would deliver them to the next owner).
    #[test]
    fn leases_do_not_reuse_a_freed_slash30_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lock = HostLock::take(dir.path()).expect("lock");
        let pool: Cidr = "10.213.0.0/28".parse().expect("pool");
        let a = Uuid::new_v4();
        let la = lock.allocate(a, pool, 0, true, None).expect("a");
        lock.release(a);
        let mut seen = Vec::new();
        for _ in 0..3 {
            let l = lock
                .allocate(Uuid::new_v4(), pool, 0, true, None)
                .expect("next");
            assert_ne!(l.net, la.net, "freed /30 reused while others were free");
            assert!(!seen.contains(&l.net));
            seen.push(l.net);
        }
        // Only the freed one is left now: it comes back after the whole pool was used.
        let last = lock
            .allocate(Uuid::new_v4(), pool, 0, true, None)
            .expect("last");
        assert_eq!(last.net, la.net);
        // And the position survives a new lock (it is persisted with the leases).
        drop(lock);
        let lock = HostLock::take(dir.path()).expect("lock again");
        assert!(lock.allocate(Uuid::new_v4(), pool, 0, true, None).is_err());
    }
}
