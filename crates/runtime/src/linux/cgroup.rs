//! Per-sandbox cgroups under one parent of our own, on cgroup v1 or v2 (detected).
//!
//! Written by hand rather than with `cgroups-rs`/`libcgroups`: we need a dozen file
//! writes (create, limits, attach, freeze, kill, usage), and a full cgroup manager
//! crate would add a large dependency tree for them.

use super::io;
use crate::{ResourceUsage, RuntimeError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use uuid::Uuid;

const ROOT: &str = "/sys/fs/cgroup";
const V1_CONTROLLERS: [&str; 5] = ["cpu", "cpuacct", "memory", "pids", "freezer"];
const CFS_PERIOD_US: u64 = 100_000;

/// Limits written when a sandbox's cgroup is made.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub vcpu: u32,
    pub memory_mb: u32,
    pub pids_max: u32,
}

/// The cgroup hierarchy in use: v1 (one mount per controller) or unified v2.
#[derive(Debug, Clone)]
pub enum Cgroups {
    /// Controller name → the parent dir (`<mount>/<parent>`); cpu and cpuacct may share one.
    V1 {
        parents: Vec<(&'static str, PathBuf)>,
    },
    V2 {
        parent: PathBuf,
    },
}

fn write(path: &Path, value: &str) -> Result<(), RuntimeError> {
    std::fs::write(path, value).map_err(io("writing a cgroup file", path))
}

/// Makes our parent dir if missing. Another runtime may remove it, empty, at any
/// moment: `create_dir_all` then fails with "exists" for a dir gone by the time it
/// looks, so that is tried again.
fn make_parent_dir(dir: &Path) -> Result<(), RuntimeError> {
    let mut made = std::fs::create_dir_all(dir);
    for _ in 0..8 {
        match &made {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                made = std::fs::create_dir_all(dir)
            }
            _ => break,
        }
    }
    made.map_err(io("creating the cgroup parent", dir))
}

/// Whether a cgroup file's open or write failed because its dir was removed meanwhile
/// (missing on the open; `ENODEV` on a write to a file opened before the removal).
pub(super) fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Cgroups {
    /// Detects v2 (a `cgroup.controllers` at the root) or v1, and makes our parent.
    pub fn detect(parent: &str) -> Result<Self, RuntimeError> {
        Self::detect_made(parent).map(|(cgroups, _)| cgroups)
    }

    /// [`Cgroups::detect`], and whether it made (a dir of) our parent just now.
    pub fn detect_made(parent: &str) -> Result<(Self, bool), RuntimeError> {
        let root = Path::new(ROOT);
        if root.join("cgroup.controllers").exists() {
            let dir = root.join(parent);
            let made = !dir.exists();
            write(&root.join("cgroup.subtree_control"), "+cpu +memory +pids")?;
            let cgroups = Cgroups::V2 { parent: dir };
            cgroups.make_parent()?;
            return Ok((cgroups, made));
        }
        let mut parents = Vec::new();
        let mut hierarchies: Vec<PathBuf> = Vec::new();
        let mut made = false;
        for ctrl in V1_CONTROLLERS {
            let mount = root.join(ctrl);
            if !mount.join("cgroup.procs").exists() {
                return Err(RuntimeError::Unsupported(format!(
                    "cgroup v1 controller {ctrl} is not mounted"
                )));
            }
            // cpu and cpuacct are often one hierarchy (a link to `cpu,cpuacct`): keep a
            // single entry per real hierarchy. The hierarchy's root is resolved, never
            // our parent: another runtime may remove that, empty, at any moment.
            let real = mount
                .canonicalize()
                .map_err(io("resolving the cgroup hierarchy", &mount))?;
            if hierarchies.contains(&real) {
                continue;
            }
            let dir = mount.join(parent);
            made |= !dir.exists();
            make_parent_dir(&dir)?;
            hierarchies.push(real);
            parents.push((ctrl, dir));
        }
        Ok((Cgroups::V1 { parents }, made))
    }

    /// Makes our parent dir(s) (again: another process may have removed them empty).
    fn make_parent(&self) -> Result<(), RuntimeError> {
        for dir in self.parents() {
            make_parent_dir(dir)?;
            if let Cgroups::V2 { .. } = self {
                let control = dir.join("cgroup.subtree_control");
                let mut written = write(&control, "+cpu +memory +pids");
                // Removed (empty) by another runtime between the two: made again.
                for _ in 0..8 {
                    match &written {
                        Err(RuntimeError::Io { source, .. }) if gone(source) => {
                            make_parent_dir(dir)?;
                            written = write(&control, "+cpu +memory +pids");
                        }
                        _ => break,
                    }
                }
                written?;
            }
        }
        Ok(())
    }

    /// The parent's name below the hierarchies' roots (`sandboxd` by default).
    fn parent_name(&self) -> Option<String> {
        let root = Path::new(ROOT);
        let rel = match self {
            Cgroups::V1 { parents } => {
                let (ctrl, dir) = parents.first()?;
                dir.strip_prefix(root.join(ctrl)).ok()?
            }
            Cgroups::V2 { parent } => parent.strip_prefix(root).ok()?,
        };
        rel.to_str().map(str::to_owned)
    }

    fn parents(&self) -> Vec<&PathBuf> {
        match self {
            Cgroups::V1 { parents } => parents.iter().map(|(_, p)| p).collect(),
            Cgroups::V2 { parent } => vec![parent],
        }
    }

    /// Every directory of the sandbox's cgroup (one per v1 hierarchy, one on v2).
    pub fn dirs(&self, id: Uuid) -> Vec<PathBuf> {
        match self {
            Cgroups::V1 { parents } => parents
                .iter()
                .map(|(_, p)| p.join(id.to_string()))
                .collect(),
            Cgroups::V2 { parent } => vec![parent.join(id.to_string())],
        }
    }

    fn dir_of(&self, ctrl: &str, id: Uuid) -> PathBuf {
        match self {
            Cgroups::V1 { parents } => {
                let found = parents.iter().find(|(c, _)| *c == ctrl).or_else(|| {
                    parents
                        .iter()
                        .find(|(c, _)| *c == "cpu" && ctrl == "cpuacct")
                });
                found
                    .map(|(_, p)| p.join(id.to_string()))
                    .unwrap_or_default()
            }
            Cgroups::V2 { parent } => parent.join(id.to_string()),
        }
    }

    fn file(&self, ctrl: &str, id: Uuid, name: &str) -> PathBuf {
        self.dir_of(ctrl, id).join(name)
    }

    /// Makes the sandbox's cgroup and writes its limits.
    pub fn create(&self, id: Uuid, limits: Limits) -> Result<(), RuntimeError> {
        self.make(id)?;
        self.set_limits(id, limits)
    }

    /// Makes the cgroup `id` without limits (a warm init waits in it).
    pub fn make(&self, id: Uuid) -> Result<(), RuntimeError> {
        for dir in self.dirs(id) {
            // A parent removed empty by another runtime that made it (see
            // [`Cgroups::remove_parent_if_unused`]) is made again.
            let mut made = std::fs::create_dir(&dir);
            for _ in 0..3 {
                match &made {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        self.make_parent()?;
                        // Made again here: this process answers for removing it now
                        // (its record names us), as the maker that removed it did.
                        if let Some(name) = self.parent_name() {
                            let records = Path::new(super::parent_record::HOST_DIR);
                            super::parent_record::remade(records, &name);
                        }
                        made = std::fs::create_dir(&dir);
                    }
                    _ => break,
                }
            }
            made.map_err(io("creating a sandbox cgroup", &dir))?;
        }
        Ok(())
    }

    /// Renames the cgroup `from` (and whatever it holds) to `to`; on failure the dirs
    /// already renamed go back. v2 has no rename: callers fall back to a cold start.
    pub fn rename(&self, from: Uuid, to: Uuid) -> Result<(), RuntimeError> {
        let pairs: Vec<(PathBuf, PathBuf)> =
            self.dirs(from).into_iter().zip(self.dirs(to)).collect();
        for (n, (a, b)) in pairs.iter().enumerate() {
            if let Err(e) = std::fs::rename(a, b) {
                for (a, b) in &pairs[..n] {
                    let _ = std::fs::rename(b, a);
                }
                return Err(RuntimeError::Io {
                    what: "renaming a sandbox cgroup",
                    path: a.clone(),
                    source: e,
                });
            }
        }
        Ok(())
    }

    /// Whether `pid` is in every directory of the cgroup `id`.
    pub fn holds(&self, id: Uuid, pid: i32) -> bool {
        let pid = pid.to_string();
        self.dirs(id).iter().all(|dir| {
            std::fs::read_to_string(dir.join("cgroup.procs"))
                .is_ok_and(|text| text.lines().any(|l| l.trim() == pid))
        })
    }

    /// Writes the limits of a cgroup, made without them or (a warm entry) with others
    /// (memory+swap, which may not be below the memory limit, ordered accordingly).
    pub fn set_limits(&self, id: Uuid, limits: Limits) -> Result<(), RuntimeError> {
        let quota = u64::from(limits.vcpu.max(1)) * CFS_PERIOD_US;
        let memory = (u64::from(limits.memory_mb.max(16)) << 20).to_string();
        let pids = limits.pids_max.max(8).to_string();
        match self {
            Cgroups::V1 { .. } => {
                write(
                    &self.file("cpu", id, "cpu.cfs_period_us"),
                    &CFS_PERIOD_US.to_string(),
                )?;
                write(
                    &self.file("cpu", id, "cpu.cfs_quota_us"),
                    &quota.to_string(),
                )?;
                let limit = self.file("memory", id, "memory.limit_in_bytes");
                let memsw = self.file("memory", id, "memory.memsw.limit_in_bytes");
                // memory+swap may never be below memory: raising, it goes first (a
                // warm entry's cgroup has both already), lowering, it goes last.
                let raising = std::fs::read_to_string(&limit)
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok())
                    .is_some_and(|now| now < (u64::from(limits.memory_mb.max(16)) << 20));
                let memsw = memsw.exists().then_some(memsw);
                if let (true, Some(memsw)) = (raising, &memsw) {
                    write(memsw, &memory)?;
                }
                write(&limit, &memory)?;
                if let (false, Some(memsw)) = (raising, &memsw) {
                    write(memsw, &memory)?;
                }
                write(&self.file("pids", id, "pids.max"), &pids)?;
            }
            Cgroups::V2 { .. } => {
                write(
                    &self.file("cpu", id, "cpu.max"),
                    &format!("{quota} {CFS_PERIOD_US}"),
                )?;
                write(&self.file("memory", id, "memory.max"), &memory)?;
                let swap = self.file("memory", id, "memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
                write(&self.file("pids", id, "pids.max"), &pids)?;
            }
        }
        Ok(())
    }

    /// The limits written in the sandbox's cgroup (as [`Cgroups::set_limits`] writes
    /// them), or `None` when it has none or is gone.
    pub fn limits(&self, id: Uuid) -> Option<Limits> {
        let (quota, memory) = match self {
            Cgroups::V1 { .. } => (
                read_u64(&self.file("cpu", id, "cpu.cfs_quota_us"))?,
                read_u64(&self.file("memory", id, "memory.limit_in_bytes"))?,
            ),
            Cgroups::V2 { .. } => (
                read_u64(&self.file("cpu", id, "cpu.max"))?,
                read_u64(&self.file("memory", id, "memory.max"))?,
            ),
        };
        Some(Limits {
            vcpu: u32::try_from(quota / CFS_PERIOD_US).ok()?,
            memory_mb: u32::try_from(memory >> 20).ok()?,
            pids_max: u32::try_from(read_u64(&self.file("pids", id, "pids.max"))?).ok()?,
        })
    }

    /// Moves `pid` (and so everything it forks later) into the sandbox's cgroup.
    pub fn attach(&self, id: Uuid, pid: i32) -> Result<(), RuntimeError> {
        for dir in self.dirs(id) {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// PIDs currently in the sandbox's cgroup (empty when it does not exist).
    pub fn procs(&self, id: Uuid) -> Vec<i32> {
        let dir = self.dirs(id).into_iter().next().unwrap_or_default();
        let text = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        text.lines().filter_map(|l| l.trim().parse().ok()).collect()
    }

    /// Freezes (`true`) or thaws the sandbox and waits until the kernel says it is done.
    pub fn set_frozen(&self, id: Uuid, frozen: bool) -> Result<(), RuntimeError> {
        let (file, value, done) = match self {
            Cgroups::V1 { .. } => (
                self.file("freezer", id, "freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
                if frozen { "FROZEN" } else { "THAWED" },
            ),
            Cgroups::V2 { .. } => (
                self.file("freezer", id, "cgroup.freeze"),
                if frozen { "1" } else { "0" },
                "",
            ),
        };
        write(&file, value)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = match self {
                Cgroups::V1 { .. } => std::fs::read_to_string(&file).map(|s| s.trim() == done),
                Cgroups::V2 { .. } => std::fs::read_to_string(file.with_file_name("cgroup.events"))
                    .map(|s| {
                        s.lines()
                            .any(|l| l == format!("frozen {}", u8::from(frozen)))
                    }),
            };
            match now {
                Ok(true) => return Ok(()),
                Ok(false) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(500))
                }
                Ok(false) => {
                    return Err(RuntimeError::Unsupported(format!(
                        "cgroup freezer did not reach {value}"
                    )))
                }
                Err(source) => {
                    return Err(RuntimeError::Io {
                        what: "reading the freezer state",
                        path: file,
                        source,
                    })
                }
            }
        }
    }

    /// Whether the sandbox's freezer currently holds it frozen.
    pub fn is_frozen(&self, id: Uuid) -> bool {
        match self {
            Cgroups::V1 { .. } => {
                std::fs::read_to_string(self.file("freezer", id, "freezer.state"))
                    .is_ok_and(|s| s.trim() != "THAWED")
            }
            Cgroups::V2 { .. } => {
                std::fs::read_to_string(self.file("freezer", id, "cgroup.freeze"))
                    .is_ok_and(|s| s.trim() == "1")
            }
        }
    }

    /// Removes the sandbox's cgroup dirs (which must be empty); missing ones are fine.
    pub fn remove(&self, id: Uuid) -> Result<(), RuntimeError> {
        self.remove_with(id, || {})
    }

    /// Kills whatever is in the sandbox's cgroup, again while a dir stays busy (a task
    /// forked or attached after the first look), and removes its dirs.
    pub fn kill_and_remove(&self, id: Uuid) -> Result<(), RuntimeError> {
        let kill_all = || {
            for pid in self.procs(id) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        };
        kill_all();
        self.remove_with(id, kill_all)
    }

    /// Removes the dirs, calling `while_busy` before each retry of a busy one.
    fn remove_with(&self, id: Uuid, while_busy: impl Fn()) -> Result<(), RuntimeError> {
        for dir in self.dirs(id) {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match std::fs::remove_dir(&dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    // A task that just exited may still be accounted for a moment.
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline =>
                    {
                        while_busy();
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(source) => {
                        return Err(RuntimeError::Io {
                            what: "removing a sandbox cgroup",
                            path: dir,
                            source,
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Removes our parent cgroup(s) if no sandbox cgroup is left in them (best effort:
    /// a parent still in use stays), the v1 cpuset one that pinning made included.
    pub fn remove_parent_if_unused(&self) {
        for parent in self.parents() {
            let _ = std::fs::remove_dir(parent);
        }
        // The cpuset copy only if sandboxd made it (an operator's stays).
        if let Some(cpuset) = super::requests::cpuset_parent(self) {
            super::parent_record::remove_cpuset_if_ours(&cpuset);
        }
    }

    /// Whether our parent dir is gone in every hierarchy.
    pub fn parent_gone(&self) -> bool {
        self.parents().iter().all(|p| !p.exists())
    }

    /// Gives back what the sandbox's memory cgroup still holds once its tasks are gone
    /// (page cache charged to it, e.g. a checkpoint image's): best effort.
    pub fn reclaim(&self, id: Uuid) {
        let (file, value) = match self {
            Cgroups::V1 { .. } => ("memory.force_empty", "0"),
            Cgroups::V2 { .. } => ("memory.reclaim", "1T"),
        };
        let _ = std::fs::write(self.file("memory", id, file), value);
    }

    /// CPU time, memory and task count of the sandbox.
    pub fn usage(&self, id: Uuid) -> Result<ResourceUsage, RuntimeError> {
        let dir = self.dir_of("pids", id);
        if !dir.exists() {
            return Err(RuntimeError::Io {
                what: "reading sandbox usage",
                path: dir,
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        Ok(match self {
            Cgroups::V1 { .. } => ResourceUsage {
                cpu_usage_ns: read_u64(&self.file("cpuacct", id, "cpuacct.usage")).unwrap_or(0),
                memory_bytes: read_u64(&self.file("memory", id, "memory.usage_in_bytes"))
                    .unwrap_or(0),
                memory_peak_bytes: read_u64(&self.file("memory", id, "memory.max_usage_in_bytes"))
                    .unwrap_or(0),
                pids: read_u64(&self.file("pids", id, "pids.current")).unwrap_or(0),
                ..Default::default()
            },
            Cgroups::V2 { .. } => {
                let stat =
                    std::fs::read_to_string(self.file("cpu", id, "cpu.stat")).unwrap_or_default();
                let usec = stat
                    .lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                ResourceUsage {
                    cpu_usage_ns: usec * 1000,
                    memory_bytes: read_u64(&self.file("memory", id, "memory.current")).unwrap_or(0),
                    memory_peak_bytes: read_u64(&self.file("memory", id, "memory.peak"))
                        .unwrap_or(0),
                    pids: read_u64(&self.file("pids", id, "pids.current")).unwrap_or(0),
                    ..Default::default()
                }
            }
        })
    }
}
