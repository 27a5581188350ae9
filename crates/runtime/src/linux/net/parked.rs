//! Parked egress networks: the host side (lease, firewall entries) of a one-shot run's
//! sandbox without a policy, kept after its sandbox ends for the next sandbox without
//! one to take over as it is, so that back-to-back `sandboxd run`s pay no `nft` run at
//! all, and the shared table is not torn down and rebuilt by each.
//!
//! Rule for when they go away: a parked network (and with the host's last one, the
//! shared table, and `ip_forward` if sandboxd turned it on) is removed once it has gone
//! [`linger`] untaken (30 s by default), by a small detached `sandboxd __net-reaper`
//! process that the parking process starts when none runs. A host never keeps more than
//! [`MAX_PARKED`]. A reaper killed before it finished is started again by the next
//! runtime that opens the network state; a marker whose network is gone is dropped.
//!
//! Markers: `parked/<id>` (the id the link and chain are named after, whose lease is
//! `leases/<id>`), its mtime the time it was parked; renamed `parked/<id>.reaping` under
//! the host lock when the reaper takes it off the list, and removed only after its
//! network is (so a reaper killed midway leaves it to the next, never a lease that no
//! marker names, which nothing would take back). `reaper.lock` is held by the
//! running reaper. Parking, taking and the reaper's decision to exit all happen under
//! the host lock, so a network parked while a reaper exits always gets a new reaper.
//!
//! A held `reaper.lock` does not always mean a reaper that will go on: a killed reaper
//! keeps it until its descriptors are closed, late in its exit, and a child forked by a
//! process probing the lock shares the probe's hold until its exec. So a holder that
//! is exiting counts as no reaper (one is started), and a reaper that finds the lock
//! held waits a while for it ([`LOCK_WAIT`]) before leaving it to the holder.

use super::host::{HostLock, Lease};
use super::NetConfig;
use crate::RuntimeError;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// Parked networks a host keeps at most (one per concurrent one-shot run, roughly).
pub const MAX_PARKED: usize = 2;
/// How long a parked network stays untaken before the reaper removes it, unless
/// `SANDBOXD_NET_LINGER_SECS` says otherwise.
const DEFAULT_LINGER: Duration = Duration::from_secs(30);
/// The environment variable setting the linger time (whole seconds).
pub const LINGER_ENV: &str = "SANDBOXD_NET_LINGER_SECS";
/// How long a reaper started while `reaper.lock` is held waits for it: an exiting
/// holder, or a prober's child between its fork and its exec, lets go within
/// milliseconds; a live reaper keeps it, and this one leaves it that.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// The hidden subcommand of the sandboxd binary that runs [`reaper_main`].
pub const REAPER_COMMAND: &str = "__net-reaper";

fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("parked")
}

/// How long a parked network lingers untaken.
pub fn linger() -> Duration {
    std::env::var(LINGER_ENV)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(DEFAULT_LINGER, Duration::from_secs)
}

/// Suffix of the marker of a parked network the reaper is removing.
const REAPING: &str = ".reaping";

fn marker(state_dir: &Path, id: Uuid) -> PathBuf {
    dir(state_dir).join(id.to_string())
}

fn reaping_marker(state_dir: &Path, id: Uuid) -> PathBuf {
    dir(state_dir).join(format!("{id}{REAPING}"))
}

/// The ids of the networks a reaper took off the parked list and has not removed yet
/// (one killed midway leaves them for the next).
fn reaping(state_dir: &Path) -> Vec<Uuid> {
    let Ok(entries) = std::fs::read_dir(dir(state_dir)) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Uuid::parse_str(name.strip_suffix(REAPING)?).ok()
        })
        .collect()
}

/// The ids of the parked networks, with when each was parked.
fn parked(state_dir: &Path) -> Vec<(Uuid, SystemTime)> {
    let Ok(entries) = std::fs::read_dir(dir(state_dir)) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let id = Uuid::parse_str(&e.file_name().to_string_lossy()).ok()?;
            let at = e
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            Some((id, at))
        })
        .collect()
}

/// Hands a parked network to sandbox `id`, kept by its state dir `keeper` (its names
/// stay the parked one's), if any.
pub(super) fn take(config: &NetConfig, id: Uuid, keeper: &Path) -> Option<Lease> {
    let lock = HostLock::take(&config.state_dir).ok()?;
    for (name, _) in parked(&config.state_dir) {
        // Handed over first: a process killed between the two leaves a marker whose
        // lease is gone (the reaper drops it), never a lease nothing names.
        match lock.hand_over(name, id, Some(keeper)) {
            Ok(lease) => {
                let _ = std::fs::remove_file(marker(&config.state_dir, name));
                return Some(lease);
            }
            // Left to the reaper, which removes it (lease or not) once it has lingered.
            Err(e) => tracing::warn!(%name, error = %e, "a parked network without its lease"),
        }
    }
    None
}

/// Parks sandbox `id`'s network instead of removing it, when its chain is plain and
/// the host has room (true: parked, its link deleted; false: the caller removes it).
/// `exe` is the sandboxd binary, run as the reaper when none runs.
pub(super) fn park(config: &NetConfig, id: Uuid, exe: &Path, quiet: bool) -> bool {
    let parkable = |lock: &HostLock| {
        let lease = lock.lease(id)?;
        (lease.plain && parked(&config.state_dir).len() < MAX_PARKED)
            .then(|| lease.named_after.unwrap_or(id))
    };
    // The link is deleted without the host lock: a veth's removal waits for an RCU
    // grace period (10-20 ms here), and the next run's start takes the host lock to
    // take a parked network. The link is this sandbox's alone, and a network that is not
    // parked after all is removed by the caller (deleting a deleted link is a no-op).
    let Some((name, addr)) = HostLock::take(&config.state_dir)
        .ok()
        .and_then(|l| Some((parkable(&l)?, l.lease(id)?.sandbox())))
    else {
        return false;
    };
    let (ifname, _) = super::names(name);
    super::link::delete(&ifname);
    // The next sandbox to take the parked network gets the address: not its flows
    // (a sandbox known to have sent nothing has none).
    if !quiet {
        super::conntrack::forget_logged(addr);
    }
    let Ok(lock) = HostLock::take(&config.state_dir) else {
        return false;
    };
    if parkable(&lock) != Some(name) {
        return false;
    }
    let marker = marker(&config.state_dir, name);
    let made =
        std::fs::create_dir_all(dir(&config.state_dir)).and_then(|()| std::fs::write(&marker, ""));
    if let Err(e) = made {
        tracing::warn!(error = %e, "cannot park a network");
        return false;
    }
    if let Err(e) = lock.hand_over(id, name, None) {
        tracing::warn!(error = %e, "cannot park a network");
        let _ = std::fs::remove_file(&marker);
        return false;
    }
    ensure_reaper(&config.state_dir, exe);
    true
}

/// Starts a reaper unless one runs (one that is exiting does not count); called with
/// the host lock held.
fn ensure_reaper(state_dir: &Path, exe: &Path) {
    if reaper_running(state_dir) {
        return;
    }
    let mut cmd = Command::new(exe);
    cmd.arg(REAPER_COMMAND)
        .arg(state_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a Ctrl-C meant for the run does not reach it.
        .process_group(0);
    match cmd.spawn() {
        // Reaped on a thread of its own (a long-lived server would keep a zombie).
        Ok(mut child) => {
            let _ = std::thread::Builder::new()
                .name("net-reaper-wait".into())
                .spawn(move || child.wait());
        }
        Err(e) => tracing::warn!(error = %e, "cannot start the parked networks' reaper"),
    }
}

/// Whether a reaper that is not exiting holds `reaper.lock`.
fn reaper_running(state_dir: &Path) -> bool {
    match try_lock(state_dir) {
        Ok(Lock::Taken(_probe)) => false,
        // The common case, told without `/proc/locks` (whose read waits for an RCU grace
        // period, 3-14 ms here, on every run's start while a reaper lingers).
        Ok(Lock::Held(_)) if recorded_reaper_live(state_dir) => true,
        // Released between the try and the look at its holders (none listed): tried
        // once more, so a reaper that just exited is not taken for a live one.
        Ok(Lock::Held(file)) if held_by_no_one(&file) => {
            !matches!(try_lock(state_dir), Ok(Lock::Taken(_)))
        }
        Ok(Lock::Held(file)) => !held_by_exiting(&file),
        Err(_) => false,
    }
}

/// `reaper.lock`, taken exclusively, or held by someone else.
enum Lock {
    Taken(std::fs::File),
    Held(std::fs::File),
}

fn try_lock(state_dir: &Path) -> std::io::Result<Lock> {
    std::fs::create_dir_all(state_dir)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(state_dir.join("reaper.lock"))?;
    // SAFETY: flock on an fd we own, without blocking.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(Lock::Taken(file));
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(Lock::Held(file)),
        _ => Err(e),
    }
}

/// `reaper.lock`, waiting up to `wait` while someone else holds it.
fn lock_within(state_dir: &Path, wait: Duration) -> std::io::Result<Option<std::fs::File>> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match try_lock(state_dir)? {
            Lock::Taken(file) => return Ok(Some(file)),
            Lock::Held(_) if std::time::Instant::now() >= deadline => return Ok(None),
            Lock::Held(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Whether every process holding `file`'s flock is exiting or gone (by `/proc/locks`
/// and the holder's `PF_EXITING` flag). A holder that cannot be seen (another PID
/// namespace's) counts as live.
fn held_by_exiting(file: &std::fs::File) -> bool {
    holders(file).is_some_and(|h| !h.is_empty() && h.iter().all(|&pid| exiting(pid)))
}

/// Whether `/proc/locks` lists no holder of `file`'s flock (released meanwhile).
fn held_by_no_one(file: &std::fs::File) -> bool {
    holders(file).is_some_and(|h| h.is_empty())
}

/// The PIDs `/proc/locks` lists as holding `file`'s flock; `None` when unreadable.
fn holders(file: &std::fs::File) -> Option<Vec<i32>> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let (major, minor) = (rustix::fs::major(meta.dev()), rustix::fs::minor(meta.dev()));
    let key = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter's line has "->" second.
    Some(
        locks
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                match fields[..] {
                    [_, "FLOCK", _, _, pid, at, ..] if at == key => pid.parse().ok(),
                    _ => None,
                }
            })
            .collect(),
    )
}

/// `PF_EXITING`, set on a task as its exit begins (include/linux/sched.h).
const PF_EXITING: u64 = 0x4;

/// Whether process `pid` is exiting (or gone); false when it cannot be told.
fn exiting(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    match task_stat(pid) {
        Err(_) => true,
        Ok(stat) => stat.flags.is_some_and(|f| f & PF_EXITING != 0),
    }
}

/// What a process's `/proc/PID/stat` tells the reaper's checks.
struct TaskStat {
    /// The kernel's flags word (`PF_*`).
    flags: Option<u64>,
    /// When it started, in clock ticks since boot (tells a reused PID apart).
    start: Option<u64>,
}

fn task_stat(pid: i32) -> std::io::Result<TaskStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command name: flags is the seventh, starttime the twentieth.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n).and_then(|f| f.parse::<u64>().ok());
    Ok(TaskStat {
        flags: field(6),
        start: field(19),
    })
}

/// The file the running reaper names itself in ("PID STARTTIME"), written once it holds
/// `reaper.lock` and removed before it lets go, so the process it names holds the lock
/// for as long as that process runs and is not exiting.
fn pid_file(state_dir: &Path) -> PathBuf {
    state_dir.join("reaper.pid")
}

/// This process named as the running reaper (it holds `reaper.lock`) until dropped.
struct ReaperName(PathBuf);

impl ReaperName {
    fn record(state_dir: &Path) -> ReaperName {
        let path = pid_file(state_dir);
        let me = std::process::id() as i32;
        if let Ok(TaskStat {
            start: Some(start), ..
        }) = task_stat(me)
        {
            let _ = std::fs::write(&path, format!("{me} {start}\n"));
        }
        ReaperName(path)
    }
}

impl Drop for ReaperName {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether the reaper named in [`pid_file`] runs and is not exiting: that process
/// holds `reaper.lock`. False when unsure (no file, a reused PID, a killed reaper that
/// left its file): the caller then asks `/proc/locks`.
fn recorded_reaper_live(state_dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(pid_file(state_dir)) else {
        return false;
    };
    let mut words = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    let (Some(Some(pid)), Some(Some(start))) = (words.next(), words.next()) else {
        return false;
    };
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match task_stat(pid) {
        Ok(stat) => stat.start == Some(start) && stat.flags.is_some_and(|f| f & PF_EXITING == 0),
        Err(_) => false,
    }
}

/// A runtime opening the network state: parked networks whose reaper died (killed)
/// get a new one.
pub(super) fn resume_reaper(state_dir: &Path, exe: &Path) {
    let any = || !parked(state_dir).is_empty() || !reaping(state_dir).is_empty();
    if !any() {
        return;
    }
    if let Ok(_lock) = HostLock::take(state_dir) {
        if any() {
            ensure_reaper(state_dir, exe);
        }
    }
}

/// The reaper: removes each parked network once it has lingered untaken, and exits when
/// none is left (the last removal takes the shared table with it).
///
/// A state dir that is gone (removed whole, as a test's temporary one is) ends it: it
/// never makes the dir again, which would leave it behind with its lock files.
pub fn reaper_main(state_dir: &Path) -> Result<(), RuntimeError> {
    let net = |e: std::io::Error| RuntimeError::Network(format!("the reaper's lock: {e}"));
    if !state_dir.is_dir() {
        return Ok(());
    }
    let Some(held) = lock_within(state_dir, LOCK_WAIT).map_err(net)? else {
        return Ok(()); // another reaper runs
    };
    // Dropped before `held` (declared after it), on every way out.
    let named = ReaperName::record(state_dir);
    let config = NetConfig {
        state_dir: state_dir.to_path_buf(),
        ..NetConfig::from_host()
    };
    let linger = linger();
    loop {
        let Some(lock) = HostLock::take_existing(state_dir)? else {
            return Ok(()); // the state dir is gone, its networks' leases with it
        };
        let now = SystemTime::now();
        let all = parked(state_dir);
        if all.is_empty() && reaping(state_dir).is_empty() {
            // Released under the host lock: a network parked from now on finds no
            // reaper and starts one. The name goes first: it never names a process
            // that no longer holds the lock.
            drop(named);
            drop(held);
            return Ok(());
        }
        let age = |at: SystemTime| now.duration_since(at).unwrap_or_default();
        for (id, _) in all.iter().filter(|(_, at)| age(*at) >= linger) {
            let _ = std::fs::rename(marker(state_dir, *id), reaping_marker(state_dir, *id));
        }
        let next = all
            .iter()
            .filter(|(_, at)| age(*at) < linger)
            .map(|(_, at)| linger - age(*at))
            .min();
        let doomed = reaping(state_dir);
        drop(lock);
        crate::faults::hit("network.reap");
        // Taken off the list under the lock: no one takes them meanwhile. Each keeps
        // its reaping marker until its teardown is done: a reaper killed midway leaves
        // the rest to the next (see [`resume_reaper`]), never a lease nothing names.
        for id in doomed {
            if super::teardown(&config, id) {
                let _ = std::fs::remove_file(reaping_marker(state_dir, id));
            }
        }
        // At least a moment between rounds: a marker that cannot be renamed or
        // removed is tried again, not spun on.
        let wait = next.unwrap_or_default();
        std::thread::sleep(wait.max(Duration::from_millis(50)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reaper_whose_state_dir_is_gone_ends_without_making_it_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let gone = dir.path().join("net");
        reaper_main(&gone).expect("the reaper ends");
        assert!(!gone.exists(), "the reaper made the state dir again");
    }

    #[test]
    fn only_a_live_recorded_reaper_with_its_start_time_counts() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(!recorded_reaper_live(dir.path()), "no file");
        let named = ReaperName::record(dir.path());
        assert!(
            recorded_reaper_live(dir.path()),
            "this process, as recorded"
        );
        let text = std::fs::read_to_string(pid_file(dir.path())).expect("recorded");
        let (pid, start) = text.trim().split_once(' ').expect("PID START");
        // The same PID with another start time: a reused PID, not the reaper.
        let reused = format!("{pid} {}\n", start.parse::<u64>().expect("ticks") + 1);
        std::fs::write(pid_file(dir.path()), reused).expect("rewrite");
        assert!(!recorded_reaper_live(dir.path()), "a reused PID");
        std::fs::write(pid_file(dir.path()), "999999999 1\n").expect("rewrite");
        assert!(!recorded_reaper_live(dir.path()), "a gone process");
        std::fs::write(pid_file(dir.path()), "garbage").expect("rewrite");
        assert!(!recorded_reaper_live(dir.path()), "garbage");
        drop(named);
        assert!(
            !pid_file(dir.path()).exists(),
            "the name goes with the reaper"
        );
    }
}
