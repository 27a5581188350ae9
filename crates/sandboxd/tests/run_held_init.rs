//! A held init (what `sandboxd run` spawns at its very start, `HeldInit`): it makes
//! its first namespaces while it waits; begun by the early init's make, it becomes the
//! sandbox's PID 1 inside the sandbox's cgroups and logs to its entry's log; dropped
//! unbegun it is ended; a run killed while its init is held leaves no process; a held
//! init that cannot join its cgroups reports it, and the run starts its sandbox cold and
//! leaves nothing.

mod common;
mod held_procs;
mod serve_bin;

use common::{mounts_under, sh_ok, slot_leases, warm_keys};
use held_procs::{children_of, cmdline, ended, wait_until};
use sandboxd_runtime::linux::HeldInit;
use sandboxd_runtime::Runtime;
use serve_bin::BIN;
use std::path::Path;
use std::process::{Command, Stdio};

fn held_init() -> HeldInit {
    HeldInit::spawn(Path::new(BIN), &["__sandbox-init".to_string()]).expect("spawn a held init")
}

fn data_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    (dir, data)
}

#[test]
fn a_start_begins_the_held_init_inside_the_sandboxs_cgroups() {
    let (_dir, data) = data_dir();
    let _cleanup = common::runtime(&data);
    let spec = common::spec("default");
    let tethers = sandboxd_runtime::linux::Tethers::new();
    let rt = common::raw_runtime(&data)
        .with_tethers(tethers.clone())
        .with_early_init(spec.disk_mb, "default", Some(held_init()));
    let sandbox = rt.start(&spec).expect("start");
    assert!(sandbox.warm, "the start did not take the early init");
    // PID 1 is the held init's child: it keeps the held init's command line.
    let agent = sandbox.agent_pid as u32;
    assert!(
        cmdline(agent).contains("--held"),
        "the agent is not the held init's: {}",
        cmdline(agent)
    );
    for dir in rt.cgroups().dirs(sandbox.id) {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).expect("cgroup.procs");
        assert!(
            procs.lines().any(|p| p == agent.to_string()),
            "the agent {agent} is not in {}: {procs:?}",
            dir.display()
        );
    }
    assert_eq!(sh_ok(&sandbox, "echo ok; hostname"), "ok\nbox\n");
    // The log it was handed is where its output goes.
    assert!(
        sandbox.state_dir.join("init.log").is_file(),
        "no init log in the state dir"
    );
    rt.destroy(&sandbox).expect("destroy");
    rt.discard_early_init();
    tethers.finish_released();
    assert_eq!(mounts_under(&data), Vec::<String>::new(), "mounts left");
    assert_eq!(slot_leases(&data), Vec::<String>::new(), "id slots left");
}

#[test]
fn a_held_init_dropped_unbegun_is_ended() {
    let held = held_init();
    let pid = held.id().expect("its pid");
    assert!(!ended(pid), "the held init did not wait");
    assert!(cmdline(pid).contains("--held"), "{}", cmdline(pid));
    drop(held);
    assert!(ended(pid), "the dropped held init {pid} still runs");
}

/// The held init makes its user, UTS, IPC and network namespaces while it waits (off
/// the start's path), in a session of its own, and still ends when dropped.
#[test]
fn a_held_init_makes_its_namespaces_while_it_waits() {
    let held = held_init();
    let pid = held.id().expect("its pid");
    let ns = |pid: &str, kind: &str| {
        std::fs::read_link(format!("/proc/{pid}/ns/{kind}"))
            .map(|l| l.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    for kind in ["user", "uts", "ipc", "net"] {
        wait_until(&format!("the held init's own {kind} namespace"), || {
            let theirs = ns(&pid.to_string(), kind);
            !theirs.is_empty() && theirs != ns("self", kind)
        });
    }
    // Its mount and PID namespaces wait for the begin (they need the host's root).
    for kind in ["mnt", "pid_for_children"] {
        assert_eq!(ns(&pid.to_string(), kind), ns("self", kind), "{kind}");
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let session = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split(' ').nth(3))
        .expect("its session");
    assert_eq!(session, pid.to_string(), "not a session of its own");
    drop(held);
    assert!(ended(pid), "the dropped held init {pid} still runs");
}

fn run(data: &Path, failpoints: Option<&str>) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--network", "none", "--data-dir"])
        .arg(data)
        .args(["--", "/bin/sh", "-c", "echo ran"])
        .env_remove("SANDBOXD_DATA_DIR")
        .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
        .stdin(Stdio::null());
    if let Some(points) = failpoints {
        cmd.env("SANDBOXD_FAILPOINTS", points);
    }
    cmd
}

#[test]
fn a_run_killed_while_its_init_is_held_leaves_no_process() {
    let (_dir, data) = data_dir();
    let mut waiting = run(&data, Some("run.held=sleep(60000)"))
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the run");
    // The run's worker (forked by the waiting process at once), and its held init.
    let mut worker = None;
    let mut held = None;
    wait_until("the run's worker holds its init", || {
        worker = children_of(waiting.id()).first().copied();
        held = worker.and_then(|w| {
            children_of(w)
                .into_iter()
                .find(|&c| cmdline(c).contains("--held"))
        });
        held.is_some()
    });
    let (worker, held) = (worker.expect("worker"), held.expect("held init"));
    for pid in [worker, waiting.id()] {
        // SAFETY: kill(2) on processes this test started (the run and its worker).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let _ = waiting.wait();
    // Its handshake closed with the worker: it ends by itself.
    wait_until("the held init of a killed run ends", || ended(held));
}

#[test]
fn a_held_init_that_cannot_join_its_cgroups_fails_and_the_run_starts_cold() {
    let (_dir, data) = data_dir();
    // The first open of the `tasks` files (the early init's, for its held init) is
    // read-only: the held init's own write fails (on cgroup v2 there is no such write,
    // and the run simply takes its early init).
    let out = run(&data, Some("start.self_move=1*return"))
        .env("RUST_LOG", "sandboxd_runtime=warn")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the run failed: {stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    // The failed move was seen, and the start went cold (on v2 there is no such move).
    if std::path::Path::new("/sys/fs/cgroup/pids").is_dir() {
        assert!(
            stderr.contains("the early init was not made; starting cold"),
            "the held init's failed move went unseen: {stderr}"
        );
    }
    assert!(serve_bin::wait_for_runs(&data).is_empty());
    let sandboxes: Vec<String> = std::fs::read_dir(data.join("sandboxes"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        sandboxes,
        Vec::<String>::new(),
        "sandbox or entry dirs left"
    );
    assert_eq!(mounts_under(&data), Vec::<String>::new(), "mounts left");
    assert_eq!(slot_leases(&data), Vec::<String>::new(), "id slots left");
}

/// The cgroup dirs named `key` under a run's parent (`sandboxd`), in every hierarchy.
fn cgroups_named(key: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("sandboxd").join(key))
                .filter(|p| p.exists())
                .collect()
        })
        .unwrap_or_default()
}

/// Regression: a run's worker caught no signal until its async runtime ran, while its
/// early init was being made already: the waiting process killed then (the worker's
/// parent-death signal), or a SIGTERM, ended the worker by the signal's default action,
/// and the begun init, alone in its cgroups, exited on its closed handshake. Its cgroups
/// (empty `sandboxd/<key>` dirs in every hierarchy), its entry dir and its disk's mount
/// were left until a later run opened the same data dir (none does for a temp dir: a
/// CI run found such cgroups left over). A handler now notes them until the run's own
/// handlers catch them, and the run ends cleanly.
#[test]
fn a_run_whose_waiting_process_dies_while_its_early_init_is_made_leaves_nothing() {
    let (_dir, data) = data_dir();
    let mut waiting = run(&data, Some("run.opened=sleep(3000)"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the run");
    let mut worker = None;
    let mut key = None;
    wait_until("the run's early init is in its cgroups", || {
        worker = children_of(waiting.id()).first().copied();
        key = warm_keys(&data).into_iter().next();
        key.as_deref().is_some_and(|k| {
            cgroups_named(k).iter().any(|dir| {
                std::fs::read_to_string(dir.join("cgroup.procs"))
                    .is_ok_and(|p| !p.trim().is_empty())
            })
        })
    });
    let (worker, key) = (worker.expect("the worker"), key.expect("the entry"));
    // SAFETY: kill(2) on the process this test started.
    unsafe { libc::kill(waiting.id() as i32, libc::SIGKILL) };
    let _ = waiting.wait();
    wait_until("the worker ends", || ended(worker));
    let left = (warm_keys(&data), cgroups_named(&key), mounts_under(&data));
    // Whatever is left goes with the next run's sweep of the data dir, before the checks.
    let _ = run(&data, None).stdout(Stdio::null()).status();
    assert!(serve_bin::wait_for_runs(&data).is_empty());
    assert_eq!(
        left.0,
        Vec::<String>::new(),
        "the early init's entry dir is left"
    );
    assert_eq!(
        left.1,
        Vec::<std::path::PathBuf>::new(),
        "its cgroups are left"
    );
    assert_eq!(left.2, Vec::<String>::new(), "its mounts are left");
}

/// Regression: a start that took a warm entry renames its dir first, its cgroups next:
/// a process killed between the two left the cgroups under the entry's key, which no
/// sweep knew any more (the dir had the sandbox's name; the sandbox's teardown removes
/// the cgroups of its id): empty `sandboxd/<key>` cgroups stayed for ever once the
/// init, alone in them, exited on its closed handshake. The entry's dir now records
/// its key, and a teardown removes the cgroups of that key too.
#[test]
fn a_run_killed_between_its_warm_dirs_rename_and_its_cgroups_leaves_no_cgroup() {
    let (_dir, data) = data_dir();
    let mut waiting = run(
        &data,
        Some("run.opened=sleep(1500);start.warm_dir=sleep(60000)"),
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("spawn the run");
    let mut key = None;
    wait_until("the run's early init is made", || {
        key = warm_keys(&data).into_iter().next();
        key.as_deref().is_some_and(|k| !cgroups_named(k).is_empty())
    });
    let key = key.expect("the entry");
    wait_until("the start renamed the entry's dir", || {
        warm_keys(&data).is_empty()
    });
    let worker = children_of(waiting.id())
        .first()
        .copied()
        .expect("the worker");
    for pid in [worker, waiting.id()] {
        // SAFETY: kill(2) on processes this test started (the run and its worker).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let _ = waiting.wait();
    wait_until("the worker ends", || ended(worker));
    // The next run sweeps what the killed one left.
    let next = run(&data, None).output().expect("the next run");
    assert!(
        next.status.success(),
        "{}",
        String::from_utf8_lossy(&next.stderr)
    );
    assert!(serve_bin::wait_for_runs(&data).is_empty());
    let left = cgroups_named(&key);
    for dir in &left {
        let _ = std::fs::remove_dir(dir); // not to leave them on the host
    }
    assert_eq!(
        left,
        Vec::<std::path::PathBuf>::new(),
        "the entry's cgroups are left"
    );
    assert_eq!(mounts_under(&data), Vec::<String>::new(), "mounts left");
}

/// Regression: for a while the signals that end a run were blocked from its first step
/// until its handlers caught them; `Command` keeps the mask across fork and exec, so
/// the held init, and with it the sandbox's PID 1 and agent (and a terminal's shell
/// it starts), ran with SIGHUP, SIGINT, SIGQUIT, SIGUSR2 and SIGTERM blocked for life
/// (`SigBlk: 0000000000004807`). Now they are noted by a handler instead (handlers do
/// not cross an exec).
#[test]
fn a_runs_sandbox_starts_with_no_signal_blocked() {
    let (_dir, data) = data_dir();
    for wait_cleanup in [false, true] {
        let mut cmd = Command::new(BIN);
        cmd.arg("run");
        if wait_cleanup {
            cmd.arg("--wait-cleanup");
        }
        let out = cmd
            .args(["--network", "none", "--data-dir"])
            .arg(&data)
            .args([
                "--",
                "/bin/sh",
                "-c",
                "grep SigBlk /proc/1/status /proc/self/status",
            ])
            .env_remove("SANDBOXD_DATA_DIR")
            .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let masks: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .collect();
        assert_eq!(masks.len(), 2, "{text}");
        for mask in masks {
            assert!(
                mask.chars().all(|c| c == '0'),
                "blocked signals in the sandbox (wait-cleanup {wait_cleanup}): {text}"
            );
        }
    }
    assert!(serve_bin::wait_for_runs(&data).is_empty());
}
