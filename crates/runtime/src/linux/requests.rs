//! Soft guarantees and dedicated CPUs for a started sandbox. CPU request → a weight
//! (v1 `cpu.shares`, 1024 per vCPU; v2 `cpu.weight`, 100 per vCPU); memory request → a
//! soft limit (v1 `memory.soft_limit_in_bytes`; v2 `memory.low`). Pinning makes a
//! cpuset cgroup beside the others (v1 `cpuset` hierarchy, same parent name) holding
//! CPUs no other pinned sandbox of ours holds, and moves the sandbox's processes in.

use super::cgroup::Cgroups;
use super::io;
use crate::{Requests, RuntimeError};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use uuid::Uuid;

const CPUSET_ROOT: &str = "/sys/fs/cgroup/cpuset";
/// Choosing and claiming CPUs is one step per process.
static PINNING: Mutex<()> = Mutex::new(());

fn write(path: &Path, value: &str) -> Result<(), RuntimeError> {
    std::fs::write(path, value).map_err(io("writing a cgroup file", path))
}

/// `0-2,5` → {0, 1, 2, 5}.
pub(super) fn parse_cpus(list: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
            out.extend(a..=b);
        }
    }
    out
}

fn format_cpus(cpus: &[u32]) -> String {
    cpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The sandbox's cgroup dir holding `file` (one per v1 hierarchy, the one on v2).
fn dir_with(cg: &Cgroups, id: Uuid, file: &str) -> Option<PathBuf> {
    cg.dirs(id).into_iter().find(|d| d.join(file).exists())
}

/// Our cpuset parent (v1 only): `/sys/fs/cgroup/cpuset/<parent name>`.
pub(super) fn cpuset_parent(cg: &Cgroups) -> Option<PathBuf> {
    let Cgroups::V1 { parents } = cg else {
        return None;
    };
    let name = parents.first()?.1.file_name()?.to_owned();
    Path::new(CPUSET_ROOT)
        .join("cpuset.cpus")
        .exists()
        .then(|| Path::new(CPUSET_ROOT).join(name))
}

pub(super) fn apply(cg: &Cgroups, id: Uuid, req: &Requests) -> Result<Vec<u32>, RuntimeError> {
    let millis = u64::from(req.cpu_millis.max(1));
    let soft = (u64::from(req.memory_mb) << 20).to_string();
    if let Some(dir) = dir_with(cg, id, "cpu.shares") {
        write(
            &dir.join("cpu.shares"),
            &(millis * 1024 / 1000).max(2).to_string(),
        )?;
    }
    if let Some(dir) = dir_with(cg, id, "cpu.weight") {
        write(
            &dir.join("cpu.weight"),
            &(millis / 10).clamp(1, 10_000).to_string(),
        )?;
    }
    if let Some(dir) = dir_with(cg, id, "memory.soft_limit_in_bytes") {
        write(&dir.join("memory.soft_limit_in_bytes"), &soft)?;
    }
    if let Some(dir) = dir_with(cg, id, "memory.low") {
        write(&dir.join("memory.low"), &soft)?;
    }
    match req.pinned_vcpus {
        None => Ok(Vec::new()),
        Some(n) => pin(cg, id, n),
    }
}

/// Host CPUs not held by a pinned sandbox of ours; `None` without a v1 cpuset.
pub(super) fn free_cpus(cg: &Cgroups) -> Option<Vec<u32>> {
    let parent = cpuset_parent(cg)?;
    let all =
        parse_cpus(&std::fs::read_to_string(Path::new(CPUSET_ROOT).join("cpuset.cpus")).ok()?);
    let mut used = BTreeSet::new();
    if let Ok(entries) = std::fs::read_dir(&parent) {
        for e in entries.flatten().filter(|e| e.path().is_dir()) {
            let cpus = std::fs::read_to_string(e.path().join("cpuset.cpus")).unwrap_or_default();
            used.extend(parse_cpus(&cpus));
        }
    }
    Some(all.difference(&used).copied().collect())
}

fn pin(cg: &Cgroups, id: Uuid, n: u32) -> Result<Vec<u32>, RuntimeError> {
    let _claim = PINNING.lock().unwrap_or_else(|p| p.into_inner());
    let parent = cpuset_parent(cg).ok_or_else(|| {
        RuntimeError::Unsupported("pinning needs the cgroup v1 cpuset controller".into())
    })?;
    let free = free_cpus(cg).unwrap_or_default();
    if free.len() < n as usize {
        return Err(RuntimeError::Unsupported(format!(
            "{n} CPUs to pin, {} free of pinned sandboxes",
            free.len()
        )));
    }
    let chosen: Vec<u32> = free.into_iter().take(n as usize).collect();
    let dir = parent.join(id.to_string());
    // Another runtime may remove the parent, empty, until our dir is in it: again then.
    let mut made = make_pinned_dir(&parent, &dir);
    for _ in 0..8 {
        match &made {
            Err(RuntimeError::Io { source, .. }) if super::cgroup::gone(source) => {
                made = make_pinned_dir(&parent, &dir)
            }
            _ => break,
        }
    }
    made?;
    let mems = std::fs::read_to_string(parent.join("cpuset.mems")).unwrap_or_default();
    write(&dir.join("cpuset.mems"), mems.trim())?;
    write(&dir.join("cpuset.cpus"), &format_cpus(&chosen))?;
    // Move every process in; re-read until none is left out (a fork may race a move).
    for _ in 0..100 {
        let inside: BTreeSet<i32> = procs(&dir.join("cgroup.procs"));
        let all = cg.procs(id);
        let missing: Vec<i32> = all.into_iter().filter(|p| !inside.contains(p)).collect();
        if missing.is_empty() {
            return Ok(chosen);
        }
        for pid in missing {
            // A process that exited meanwhile cannot be moved; that is fine.
            let _ = std::fs::write(dir.join("cgroup.procs"), pid.to_string());
        }
    }
    Ok(chosen)
}

/// Makes the cpuset parent (if missing) with the root's CPUs and nodes, and `dir` in it.
/// A parent found keeps its CPUs and nodes (pinned sandboxes run in it), unless they
/// are empty (made by a process that stopped before it filled them).
fn make_pinned_dir(parent: &Path, dir: &Path) -> Result<(), RuntimeError> {
    let root = Path::new(CPUSET_ROOT);
    let made = match std::fs::create_dir(parent) {
        Ok(()) => {
            if let Some(name) = parent.file_name().and_then(|n| n.to_str()) {
                super::parent_record::cpuset_made(name);
            }
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(io("creating the cpuset parent", parent)(e)),
    };
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let empty =
            || std::fs::read_to_string(parent.join(file)).is_ok_and(|v| v.trim().is_empty());
        if made || empty() {
            let value = std::fs::read_to_string(root.join(file))
                .map_err(io("reading the root cpuset", root))?;
            write(&parent.join(file), value.trim())?;
        }
    }
    std::fs::create_dir(dir).map_err(io("creating a sandbox cpuset", dir))
}

fn procs(file: &Path) -> BTreeSet<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Removes the sandbox's cpuset, if it was pinned (its processes are gone by then), and
/// the cpuset parent with it when it was the last one there and sandboxd made it: the
/// cpuset parent lives as long as a pinned sandbox of ours, whoever made the other
/// parents (a runtime that found those keeps them, and would otherwise leave this one
/// empty); an operator's stays.
/// A pinning that finds the parent gone meanwhile makes it again (`pin`).
pub(super) fn remove(cg: &Cgroups, id: Uuid) -> Result<(), RuntimeError> {
    let Some(parent) = cpuset_parent(cg) else {
        return Ok(());
    };
    let dir = parent.join(id.to_string());
    match std::fs::remove_dir(&dir) {
        Ok(()) => {
            // Busy while another pinned sandbox is in it: that one takes it along. Only
            // one sandboxd made: an operator's (its CPUs chosen) stays.
            super::parent_record::remove_cpuset_if_ours(&parent);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("removing a sandbox cpuset", &dir)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpus("0-2,5\n").into_iter().collect::<Vec<_>>(),
            [0, 1, 2, 5]
        );
        assert!(parse_cpus("").is_empty());
        assert_eq!(format_cpus(&[1, 3]), "1,3");
    }
}
