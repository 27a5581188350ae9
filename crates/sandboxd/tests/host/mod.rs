//! What a sandbox holds on the host, seen from outside the server through /proc, the
//! mount table and the cgroup hierarchies: for tests that kill parts of it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Host PIDs of the processes whose cgroup names `id`.
pub fn processes_of(id: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|cgroup| cgroup.contains(id))
        })
        .collect()
}

/// The sandbox's agent: the process in its cgroup that is PID 1 of its PID namespace
/// (its `NSpid` line ends in 1), with its start time.
pub fn agent_of(id: &str) -> Option<(i32, u64)> {
    processes_of(id).into_iter().find_map(|pid| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let nspid = status.lines().find(|l| l.starts_with("NSpid:"))?;
        let innermost = nspid.split_whitespace().last()?;
        (innermost == "1" && nspid.split_whitespace().count() > 2)
            .then(|| Some((pid, start_ticks(pid)?)))
            .flatten()
    })
}

/// Start time of `pid` in clock ticks (field 22 of its stat).
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Whether the process that was `pid` started at `ticks` still exists, even as a zombie.
pub fn exists(pid: i32, ticks: u64) -> bool {
    start_ticks(pid) == Some(ticks)
}

/// SIGKILL to a process the test found on the host.
pub fn kill9(pid: i32) {
    // SAFETY: kill(2) with integer arguments.
    let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill -9 {pid}: {}", std::io::Error::last_os_error());
}

/// Mount points under `dir` or naming `id`.
pub fn mounts_of(dir: &Path, id: &str) -> Vec<String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let prefix = dir.display().to_string();
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&prefix) || m.contains(id))
        .map(str::to_owned)
        .collect()
}

/// Cgroup directories named `id` under every mounted hierarchy's `sandboxd` parent.
pub fn cgroups_of(id: &str) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    mountinfo
        .lines()
        .filter(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|t| t.starts_with("cgroup"))
        })
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| Path::new(m).join("sandboxd").join(id))
        .filter(|d| d.exists())
        .collect()
}

/// Nothing of sandbox `id` is left: process, cgroup, mount or state directory.
pub fn assert_gone(data: &Path, id: &str) {
    assert_eq!(processes_of(id), Vec::<i32>::new(), "processes left");
    let state_dir = data.join("sandboxes").join(id);
    assert_eq!(
        mounts_of(&state_dir, id),
        Vec::<String>::new(),
        "mounts left"
    );
    assert_eq!(cgroups_of(id), Vec::<PathBuf>::new(), "cgroups left");
    assert!(!state_dir.exists(), "state directory left");
}

/// Polls `probe` every 20 ms until it returns `Some`, failing with `what` after `limit`.
pub fn poll<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
