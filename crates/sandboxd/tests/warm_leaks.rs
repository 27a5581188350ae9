//! Warm entries (`sandboxes/.warm-<key>`) leave no mount or loop device behind: one a
//! killed `sandboxd run` left beside a running server (its early init, made and never
//! taken) is removed by that server, and a runtime opening the data dir while another
//! process is making an entry leaves that entry alone. Before, the first stayed mounted
//! for the server's whole life (the test's temp dir removal then deleted its
//! `layer.img` under the mount: a `(deleted)` loop device and a mounted
//! `.warm-<key>/layer` left on the host), and the second removed a live make's files.

mod common;
mod serve_bin;

use serve_bin::{Server, BIN};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long anything polled here may take on a loaded machine.
const BOUND: Duration = Duration::from_secs(120);

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < BOUND, "still after {BOUND:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Children of process `parent`.
fn children_of(parent: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("PPid:"))
                    .is_some_and(|p| p.trim() == parent.to_string())
            })
        })
        .collect()
}

/// The warm entry dirs (`.warm-*`, finished or not) under `data`.
fn warm_dirs(data: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data.join("sandboxes"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(".warm-"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// The PID an entry's owner mark names (`None`: no complete mark).
fn owner_pid(entry: &Path) -> Option<i32> {
    let mark = std::fs::read_to_string(entry.join("owner")).ok()?;
    mark.split_whitespace().next()?.parse().ok()
}

/// Mount points at or below `data`, and loop devices backed by a file below it.
fn mounts_and_loops(data: &Path) -> Vec<String> {
    let prefix = data.display().to_string();
    let below = |p: &str| p == prefix || p.starts_with(&format!("{prefix}/"));
    let mut left: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(below))
        .map(|l| format!("mount {l}"))
        .collect();
    for e in std::fs::read_dir("/sys/block")
        .expect("/sys/block")
        .flatten()
    {
        let Ok(file) = std::fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        let file = file.trim_end();
        if below(file.strip_suffix(" (deleted)").unwrap_or(file)) {
            left.push(format!("loop device {:?} on {file}", e.file_name()));
        }
    }
    left
}

/// Whether `dir` is a mount point in our mount namespace.
fn is_mounted(dir: &Path) -> bool {
    let dir = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.as_str()))
}

/// A `sandboxd run` killed (SIGKILL, its worker and its waiting process) after its early
/// init is made and before its start takes it, beside a running server: the server
/// removes that entry (its mounted disk, its loop device, its cgroups, its id slot)
/// within a few of its sweeps, and once the server is gone nothing is mounted below the
/// data dir and no loop device is backed by a file in it.
#[test]
fn a_killed_runs_early_init_beside_a_server_is_removed_by_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().canonicalize().expect("canonical");
    let server = Server::start_with_env(&data, None, &[]);

    // Held at its STARTING write (before its start), while its early init is made.
    let mut held = Command::new(BIN)
        .args(["run", "--network", "none", "--data-dir"])
        .arg(&data)
        .args(["--", "/bin/true"])
        .env_remove("SANDBOXD_DATA_DIR")
        .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
        .env("SANDBOXD_FAILPOINTS", "store.save.STARTING=sleep(60000)")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the held run");
    let mut workers = Vec::new();
    wait_until("the held run's worker", || {
        workers = children_of(held.id());
        workers.len() == 1
    });
    let worker = workers[0];
    let mut entry = None;
    wait_until("the held run's early init, its disk mounted", || {
        entry = warm_dirs(&data)
            .into_iter()
            .find(|e| owner_pid(e) == Some(worker) && is_mounted(&e.join("layer")));
        entry.is_some()
    });
    let entry = entry.expect("the early init's entry");
    for pid in [worker, held.id() as i32] {
        // SAFETY: kill(2) on processes this test started (the run and its worker).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    held.wait().expect("reap the held run");

    // The server sweeps dead runs' leftovers every 5 s.
    wait_until("the server removes the killed run's early init", || {
        !entry.exists()
    });
    drop(server);
    let left = mounts_and_loops(&data);
    assert!(left.is_empty(), "left on the host: {left:#?}");
    assert_eq!(warm_dirs(&data), Vec::<PathBuf>::new(), "warm entries left");
}

/// A runtime opening the data dir (as every `sandboxd run` and the gVisor tier do,
/// sweeping dead owners' entries) while another runtime's entry is in the making, its
/// owner mark being written (held there by a failpoint), never finds a partial mark:
/// the entry's dir shows no owner file until the mark is complete (it is written whole).
/// The sweep may take the still-empty dir; the make then makes another, and the pool
/// fills with nothing left behind. Before, an owner file read while still empty counted
/// as a dead owner's, and the live entry was removed under its maker.
#[test]
fn a_sweep_during_an_owner_marks_write_finds_no_partial_mark_and_the_pool_fills() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().canonicalize().expect("canonical");
    let rt = common::raw_runtime(&data)
        .with_warm_inits(1)
        .with_warm_images(0);
    fail::cfg("warm.owner", "pause").expect("failpoint");
    rt.grow_warm_inits(1);
    wait_until("an entry held in its owner mark's write", || {
        !warm_dirs(&data).is_empty()
    });
    let partial: Vec<PathBuf> = warm_dirs(&data)
        .into_iter()
        .filter(|e| e.join("owner").exists())
        .collect();
    assert_eq!(
        partial,
        Vec::<PathBuf>::new(),
        "an owner file before its mark is complete"
    );
    let other = common::raw_runtime(&data);
    fail::remove("warm.owner");
    let mut ready = None;
    wait_until("an entry in the pool", || {
        ready = warm_dirs(&data)
            .into_iter()
            .find(|e| e.join("ready").exists());
        ready.is_some()
    });
    let ready = ready.expect("the ready entry");
    let mark = std::fs::read_to_string(ready.join("owner")).expect("its owner mark");
    assert_eq!(
        mark.split_whitespace().count(),
        2,
        "a complete mark: {mark:?}"
    );
    drop(other);
    drop(rt);
    let left = mounts_and_loops(&data);
    assert!(left.is_empty(), "left on the host: {left:#?}");
    assert_eq!(warm_dirs(&data), Vec::<PathBuf>::new(), "warm entries left");
}
