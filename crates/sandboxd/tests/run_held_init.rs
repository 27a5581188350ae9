//! A held init (what `sandboxd run` spawns at its very start, `HeldInit`): begun by the
//! early init's make, it becomes the sandbox's PID 1 inside the sandbox's cgroups and
//! logs to its entry's log; dropped unbegun it is ended; a run killed while its init is
//! held leaves no process; a held init that cannot join its cgroups reports it, and the
//! run starts its sandbox cold and leaves nothing.

mod common;
mod serve_bin;

use common::{mounts_under, sh_ok, slot_leases};
use sandboxd_runtime::linux::HeldInit;
use sandboxd_runtime::Runtime;
use serve_bin::BIN;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn held_init() -> HeldInit {
    HeldInit::spawn(Path::new(BIN), &["__sandbox-init".to_string()]).expect("spawn a held init")
}

/// Whether `pid` is gone or a zombie (it exited; its reaper may not have looked yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state is the first field after the parenthesised command.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Processes whose parent is `ppid`.
fn children_of(ppid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("PPid:"))
                    .is_some_and(|p| p.trim() == ppid.to_string())
            })
        })
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
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
        .with_early_init(spec.disk_mb, Some(held_init()));
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
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "the run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
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
