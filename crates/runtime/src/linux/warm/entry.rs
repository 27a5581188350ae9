//! One warm entry: made (init spawned into a cgroup of its own, id maps written, disk
//! and root mounted, network wired, as its [`Shape`] says), ended, and removed again,
//! also when a dead process left it behind.

use super::Shape;
use crate::linux::cgroup::Cgroups;
use crate::linux::cgroup_self_move::SelfMove;
use crate::linux::handshake::{self, Channel, InitConfig, Msg};
use crate::linux::held_init::HeldInit;
use crate::linux::init_child::InitChild;
use crate::linux::init_process::{expect, map_ids, protect_from_oom, spawn_init};
use crate::linux::net::{wired, NetConfig};
use crate::linux::slots::Slots;
use crate::linux::start::OnNetns;
use crate::linux::{disk, io, layer_pins, refill, rootfs, sys, whole_file, LinuxConfig};
use crate::RuntimeError;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use uuid::Uuid;

/// Name prefix of a warm entry's directory under `sandboxes/`.
pub(in crate::linux) const DIR_PREFIX: &str = ".warm-";
/// Empty file in an entry's dir once it is in the pool, ready to be taken (for
/// operators and tests looking at the data dir).
pub(in crate::linux) const READY_FILE: &str = "ready";
/// File in an entry's dir holding its id slot's base (for the sweep of a dead owner's)
/// on its first line, and the entry's key on its second, both written before the
/// entry's cgroups are made: a start renames the dir the sandbox's before it renames
/// the cgroups, and a teardown of a start interrupted between the two finds the key's
/// cgroups through it ([`entry_key`]). One file: a new file is an inode to allocate on
/// the early init's path.
pub(in crate::linux) const SLOT_FILE: &str = "slot";

/// The slot base an entry's (or a renamed entry's) `slot` file holds.
pub(in crate::linux) fn slot_base(dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(dir.join(SLOT_FILE)).ok()?;
    text.lines().next()?.trim().parse().ok()
}

/// The key of the warm entry whose dir `dir` was (a sandbox's state dir, renamed from
/// an entry's), if it was one.
pub(in crate::linux) fn entry_key(dir: &Path) -> Option<Uuid> {
    let text = std::fs::read_to_string(dir.join(SLOT_FILE)).ok()?;
    Uuid::parse_str(text.lines().nth(1)?.trim()).ok()
}

/// An init waiting for its sandbox.
pub(in crate::linux) struct Warm {
    pub key: Uuid,
    pub child: InitChild,
    pub channel: Channel,
    pub dir: PathBuf,
    /// Its host id range (the slot file names `key` until a start takes it).
    pub host_id_base: u32,
    /// What it was made for: disk, network, the root mounted.
    pub shape: Shape,
    /// With a root: its PID 1 (host PID, start ticks), serving parked in that root.
    pub parked: Option<(i32, u64)>,
}

impl Warm {
    /// Whether its init (or parked PID 1) still runs.
    pub fn is_alive(&mut self) -> bool {
        match self.parked {
            Some((pid, ticks)) => sys::is_same_live_process(pid, ticks),
            None => matches!(self.child.try_wait(), Ok(None)),
        }
    }
}

/// What making entries needs from the runtime.
pub(super) struct Maker {
    pub config: LinuxConfig,
    pub cgroups: Cgroups,
    pub slots: Slots,
    pub net: Option<NetConfig>,
    /// Whether a parked PID 1 stays tied to this process once started (a one-shot
    /// run's early init: see `tether`); a pool's never is.
    pub tethered: bool,
}

impl Maker {
    /// Spawns an init into a fresh cgroup, waits for its user namespace, gives it an id
    /// range, and mounts and wires what `shape` says.
    pub fn make(&self, shape: &Shape) -> Result<Warm, RuntimeError> {
        self.make_from(shape, None)
    }

    /// [`Maker::make`], beginning `held` (spawned ahead) instead of spawning an init.
    pub fn make_from(&self, shape: &Shape, held: Option<HeldInit>) -> Result<Warm, RuntimeError> {
        self.make_telling(shape, held, None)
    }

    /// [`Maker::make_from`], telling `on_netns` the init's network namespace as soon
    /// as it exists (with its user namespace, long before the entry is parked).
    pub fn make_telling(
        &self,
        shape: &Shape,
        held: Option<HeldInit>,
        on_netns: OnNetns<'_>,
    ) -> Result<Warm, RuntimeError> {
        crate::faults::check("warm.make")?;
        let (key, dir) = self.make_dir()?;
        let mut made: Option<(InitChild, Channel)> = None;
        let mut base = None;
        let result = self.set_up(key, &dir, shape, (held, on_netns), &mut made, &mut base);
        match (result, made, base) {
            (Ok(parked), Some((child, channel)), Some(host_id_base)) => Ok(Warm {
                key,
                child,
                channel,
                dir,
                host_id_base,
                shape: shape.clone(),
                parked,
            }),
            (result, made, _) => {
                if let Some((mut child, _)) = made {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                self.remove(key, &dir, shape.wired);
                Err(result.err().unwrap_or_else(|| {
                    RuntimeError::AgentStart("the warm init was not spawned".into())
                }))
            }
        }
    }

    /// Makes an entry's dir with its owner mark in it. Another runtime opening the data
    /// dir (the server's gVisor tier, a `sandboxd run`) sweeps entry dirs without an
    /// owner and may take an empty one in its first instant: the owner write then finds
    /// no dir, and a new dir is made (a few times at most), so that the pool's fill does
    /// not stop on it. The mark is written whole (`whole_file`): the dir stays empty
    /// until the owner file appears complete, so a sweep never reads a partial mark.
    fn make_dir(&self) -> Result<(Uuid, std::path::PathBuf), RuntimeError> {
        let mut tries = 0;
        loop {
            let key = Uuid::new_v4();
            let dir = self
                .config
                .data_dir
                .join("sandboxes")
                .join(format!("{DIR_PREFIX}{key}"));
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(io("creating a warm init's dir", &dir))?;
            let owner_file = dir.join("owner");
            let written =
                whole_file::Unlinked::write(&dir, &refill::owner_mark()).and_then(|mark| {
                    let _ = crate::faults::hit("warm.owner");
                    mark.link(&owner_file)
                });
            match written {
                Ok(()) => return Ok((key, dir)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 5 => {
                    tracing::debug!(dir = %dir.display(), "a sweep took a new warm init's dir; making another");
                    tries += 1;
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(io("writing a warm init's owner", &owner_file)(e));
                }
            }
        }
    }

    fn set_up(
        &self,
        key: Uuid,
        dir: &Path,
        shape: &Shape,
        (held, on_netns): (Option<HeldInit>, OnNetns<'_>),
        made: &mut Option<(InitChild, Channel)>,
        base: &mut Option<u32>,
    ) -> Result<Option<(i32, u64)>, RuntimeError> {
        let t0 = std::time::Instant::now();
        let tm = |phase: &str| {
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            tracing::debug!(%key, phase, ms, "warm make");
        };
        let host_id_base = self.slots.allocate(key)?;
        *base = Some(host_id_base);
        let slot_file = dir.join(SLOT_FILE);
        std::fs::write(&slot_file, format!("{host_id_base}\n{key}\n"))
            .map_err(io("writing a warm init's slot", &slot_file))?;
        // The start fills it (no inode to allocate on its path: see `handle_file`).
        crate::linux::handle_file::premake(dir)?;
        // The disk (a loop device's configuration waits for an RCU grace period, and its
        // mount) is made on a thread of its own while the init is spawned and mapped and
        // the root's layers pinned.
        let (disk, userns) = std::thread::scope(|s| {
            let disk = s.spawn(|| {
                let layer_count = shape.root.as_ref().map_or(1, |(_, layers)| layers.len());
                let disk = Some((self.config.data_dir.as_path(), shape.disk_mb));
                let made = rootfs::prepare_dirs(dir, layer_count, host_id_base, disk);
                tm("dirs and disk");
                made
            });
            let userns = self.spawn_mapped(key, dir, host_id_base, (held, on_netns), made);
            tm("init mapped");
            // The root's layers pinned (a file in the entry's dir, not on its disk)
            // while the disk is still being made, rather than after it.
            let pinned = match (&userns, &shape.root) {
                (Ok(_), Some((image, layers))) => {
                    let pinned = self.pin(dir, image, layers);
                    tm("pinned");
                    pinned
                }
                _ => Ok(()),
            };
            let disk = disk.join().unwrap_or_else(|_| {
                Err(RuntimeError::AgentStart(
                    "making a warm init's disk panicked".into(),
                ))
            });
            (disk, userns.and_then(|userns| pinned.map(|()| userns)))
        });
        let userns = userns?;
        disk?;
        // Wired first: it stages a file in the upper dir, which must not change under
        // a mounted overlay.
        if let (true, Some(net), Some((child, _))) = (shape.wired, &self.net, made.as_ref()) {
            let init = (child.id() as i32, rootfs::upper(dir), host_id_base);
            wired::wire(net, key, (init.0, &init.1, init.2), &shape.policy)?;
        }
        let Some((image, layers)) = &shape.root else {
            return Ok(None);
        };
        let restage = shape.wired
            && self.net.is_some()
            && wired::unstage_over_linked_etc(&rootfs::upper(dir), layers)?;
        rootfs::mount_root(dir, layers, &userns, image == crate::linux::DEFAULT_IMAGE)?;
        tm("root mounted");
        if let (true, Some(net)) = (restage, &self.net) {
            wired::write_after_mount(net, &rootfs::rootfs(dir), host_id_base)?;
        }
        let _ = crate::faults::hit("warm.parking");
        crate::faults::check("warm.park")?;
        let parked = self.park(key, dir, made).map(Some);
        tm("parked");
        parked
    }

    /// Spawns the init (or begins `held`) into a fresh cgroup (kept in `made`), waits
    /// for its user namespace, maps its ids onto `host_id_base`'s range and protects it
    /// from the OOM killer; its user namespace.
    fn spawn_mapped(
        &self,
        key: Uuid,
        dir: &Path,
        host_id_base: u32,
        (held, on_netns): (Option<HeldInit>, OnNetns<'_>),
        made: &mut Option<(InitChild, Channel)>,
    ) -> Result<OwnedFd, RuntimeError> {
        let log = dir.join("init.log");
        // Its cgroup first: on v1 the init moves itself into it before its exec (no
        // RCU grace period, `cgroup_self_move`), or a held one once begun.
        let t0 = std::time::Instant::now();
        let tm = |phase: &str| {
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            tracing::trace!(%key, phase, ms, "warm spawn");
        };
        self.cgroups.make(key)?;
        let moves = SelfMove::open(&self.cgroups, key)?;
        tm("cgroups made");
        let begun = held.map(|held| held.begin(&log, moves.as_ref()));
        tm("begun");
        let (child, ours) = match begun {
            Some(Ok(begun)) => begun,
            other => {
                if let Some(Err(e)) = other {
                    tracing::debug!(error = %e, "the held init could not begin; spawning one");
                }
                let (ours, theirs) =
                    handshake::pair().map_err(|e| RuntimeError::AgentStart(e.to_string()))?;
                let child = spawn_init(&self.config, &theirs.0, &log, moves.as_ref())?;
                (child, ours)
            }
        };
        let on_v2 = moves.is_none();
        drop(moves);
        let pid = child.id() as i32;
        let ours = &made.insert((child, ours)).1;
        // On v2 the first move waits for an RCU grace period: on a thread of its own
        // while the ids are mapped.
        std::thread::scope(|s| {
            let attach = on_v2.then(|| s.spawn(|| self.cgroups.attach(key, pid)));
            let mapped = (|| {
                expect(ours, &log, |m| matches!(m, Msg::UserNs).then_some(()))?;
                tm("user namespace");
                if let Some(tell) = on_netns {
                    if let Ok(ns) = std::fs::File::open(format!("/proc/{pid}/ns/net")) {
                        tell(Some(ns.into()));
                    }
                }
                let userns = map_ids(pid, host_id_base)?;
                protect_from_oom(pid)?;
                tm("mapped");
                Ok(userns)
            })();
            let attached = match attach {
                Some(attach) => attach.join().unwrap_or_else(|_| {
                    Err(RuntimeError::AgentStart(
                        "attaching a warm init to its cgroups panicked".into(),
                    ))
                }),
                None => Ok(()),
            };
            attached.and(mapped)
        })
    }

    /// Records `layers` in the entry's dir as a sandbox's are, under the collector's
    /// lock, once image `image` is seen to still resolve to them: from then on no
    /// collection deletes them while the entry lives.
    fn pin(&self, dir: &Path, image: &str, layers: &[PathBuf]) -> Result<(), RuntimeError> {
        let data_dir = &self.config.data_dir;
        let lock = layer_pins::share_gc_lock(&data_dir.join("layers"))?;
        if image != crate::linux::DEFAULT_IMAGE
            && !super::images::still_stacks(data_dir, image, layers)
        {
            return Err(RuntimeError::UnknownImage(image.to_owned()));
        }
        let digests = layers
            .iter()
            .filter_map(|l| l.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        layer_pins::LayerPin::new(digests, lock).write(dir)
    }

    /// Lets the init make its PID 1, which switches into the root, reports ready and
    /// serves there, parked until a start (see `InitConfig::park`).
    fn park(
        &self,
        key: Uuid,
        dir: &Path,
        made: &mut Option<(InitChild, Channel)>,
    ) -> Result<(i32, u64), RuntimeError> {
        let Some((child, ours)) = made else {
            return Err(RuntimeError::AgentStart("the warm init is gone".into()));
        };
        let log = dir.join("init.log");
        let config = InitConfig {
            rootfs: rootfs::rootfs(dir),
            socket: dir.join("agent.sock"),
            hostname: "sandbox".into(),
            park: true,
            max_ptys: self.config.max_ptys_per_sandbox,
            tethered: self.tethered,
        };
        ours.send(&Msg::Go(config))
            .map_err(|e| RuntimeError::AgentStart(e.to_string()))?;
        let pid1 = expect(ours, &log, |m| match m {
            Msg::Pid(p) => Some(*p),
            _ => None,
        })?;
        // Forked after its parent's move (its own, or the attach joined above), so in
        // the entry's cgroup already: anything else is a broken move, not to be hidden.
        if !self.cgroups.holds(key, pid1) {
            return Err(RuntimeError::AgentStart(
                "a warm init's PID 1 is not in the entry's cgroups".into(),
            ));
        }
        ours.send(&Msg::Attached)
            .map_err(|e| RuntimeError::AgentStart(e.to_string()))?;
        expect(ours, &log, |m| matches!(m, Msg::Ready).then_some(()))?;
        // The intermediate exits once it has reported.
        let _ = child.wait();
        // A run's early init leaves its first request to the run: made here, it was on
        // the start's path (the start waits for the make) and cost a spawn more.
        if !self.tethered {
            super::first_command::run(&dir.join("agent.sock"));
        }
        let ticks = sys::proc_stat(pid1)
            .map(|(_, t)| t)
            .ok_or_else(|| RuntimeError::AgentStart("the parked PID 1 exited".into()))?;
        Ok((pid1, ticks))
    }

    /// Ends an entry's init and removes its cgroup, mounts, slot, network and dir.
    pub fn discard(&self, mut warm: Warm) {
        let _ = warm.child.kill();
        let _ = warm.child.wait();
        if let Some((pid, ticks)) = warm.parked {
            // Ours to reap (we are its subreaper) before its root is unmounted, alive or
            // a zombie already; the start time tells it from a later process of its PID.
            if sys::proc_stat(pid).is_some_and(|(_, t)| t == ticks) {
                let pid = nix::unistd::Pid::from_raw(pid);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(pid, None);
            }
        }
        drop(warm.channel);
        self.remove(warm.key, &warm.dir, warm.shape.wired);
    }

    fn remove(&self, key: Uuid, dir: &Path, wired: bool) {
        remove(&self.cgroups, &self.slots, key, dir);
        if let (true, Some(net)) = (wired, &self.net) {
            wired::unwire(net, key);
        }
    }
}

/// Removes what entry `key` made, killing what is left in its cgroup.
fn remove(cgroups: &Cgroups, slots: &Slots, key: Uuid, dir: &Path) {
    if let Err(e) = cgroups.kill_and_remove(key) {
        tracing::warn!(%key, error = %e, "removing a warm init's cgroup");
    }
    if let Err(e) = rootfs::unmount_root(dir) {
        tracing::warn!(%key, error = %e, "unmounting a warm init's root");
    }
    if let Err(e) = disk::release(dir, false) {
        tracing::warn!(%key, error = %e, "releasing a warm init's disk");
    }
    // No slot file: killed (or failed) between its slot's lease and that file. The lease
    // is found by its holder then, so that it does not wait for the next reclaim.
    if let Some(base) = slot_base(dir).or_else(|| slots.held_by(key)) {
        slots.free(base, key);
    }
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "removing a warm init's dir");
        }
    }
}

/// What a sweep does with an entry dir that is still empty (no owner mark in it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::linux) enum EmptyDirs {
    /// Removed (`rmdir`, only while empty): a runtime's sweep as it opens the data dir.
    Remove,
    /// Left for the next runtime's open: a sweep beside this process's own makes (a
    /// run's early init), whose dirs are empty in their first instant.
    Leave,
}

/// Removes the entries under `data_dir` whose owning process is gone (one killed before
/// it could drain its pool), and empty entry dirs as `empty_dirs` says; run by every
/// runtime that opens the data dir.
pub(in crate::linux) fn sweep_stale(
    data_dir: &Path,
    cgroups: &Cgroups,
    slots: &Slots,
    empty_dirs: EmptyDirs,
) {
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
        let owner_file = entry.path().join("owner");
        let Ok(owner) = std::fs::read_to_string(&owner_file) else {
            // A make writes the owner before anything else, so a dir without one is
            // either a make in its first instant (empty: `rmdir` takes it only while
            // empty, and that make then fails cleanly on its owner write) or what a
            // killed process left while making or removing it: removed whatever its age.
            let dir = entry.path();
            let empty = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_none());
            if empty {
                if empty_dirs == EmptyDirs::Remove {
                    let _ = std::fs::remove_dir(&dir);
                }
            } else if !dir.join("owner").exists() {
                remove(cgroups, slots, key, &dir);
            }
            continue;
        };
        if !refill::owner_alive(&owner) {
            remove(cgroups, slots, key, &entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A make killed between its slot's lease and its slot file left an entry whose
    /// owner is gone: the sweep removes it and frees that lease (found by its holder).
    #[test]
    fn a_swept_entry_without_a_slot_file_frees_its_lease() {
        let root = tempfile::tempdir().expect("tempdir");
        let (host, data) = (root.path().join("ids"), root.path().join("data"));
        let key = Uuid::new_v4();
        let dir = data.join("sandboxes").join(format!("{DIR_PREFIX}{key}"));
        std::fs::create_dir_all(&dir).expect("entry dir");
        // Gone: no process has PID 0.
        std::fs::write(dir.join("owner"), "0 0\n").expect("owner");
        let slots = Slots::open(&host, &data).expect("slots");
        let base = slots.allocate(key).expect("the make's lease");
        let parent = format!("sandboxd-test-{}", Uuid::new_v4().simple());
        let cgroups = Cgroups::detect(&parent).expect("cgroups");
        sweep_stale(&data, &cgroups, &slots, EmptyDirs::Remove);
        cgroups.remove_parent_if_unused();
        assert!(!dir.exists(), "the stale entry stayed");
        assert_eq!(slots.held_by(key), None, "its lease (base {base}) stayed");
    }
}
