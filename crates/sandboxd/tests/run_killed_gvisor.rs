//! A `sandboxd run --isolation gvisor` killed with SIGKILL (the process the caller waits
//! for and its worker) leaves its sandbox's sentry running (gVisor's PID 1 is not
//! tethered); its owner mark, the one killed-run mechanism of both tiers, lets the next
//! run end it and remove everything else (state dir, mounts, cgroups, runsc state, the
//! store's RUNNING record). A data dir of an older binary, whose gVisor run sandbox
//! has only a `runs/` marker and no owner mark, still gets it ended. And a server
//! starting beside a gVisor run mid-create leaves that run's runsc container alone.

mod common;
mod gvisor_common;
#[allow(dead_code)]
#[path = "gvisor_common/server.rs"]
mod gvisor_server;
mod serve_bin;

use gvisor_common::processes_naming;
use sandboxd_store::{SqliteStore, Store};
use serve_bin::BIN;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use uuid::Uuid;

/// `sandboxd run` on `data` (`args` before `--`), `argv` after it.
fn run_cmd(data: &Path, args: &[&str], argv: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("run")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .arg("--")
        .args(argv)
        .env_remove("SANDBOXD_DATA_DIR")
        .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
        .stdin(Stdio::null());
    cmd
}

const GVISOR: [&str; 4] = ["--isolation", "gvisor", "--network", "none"];

/// A gVisor run sleeping in its command, once it printed `started`.
fn start_sleeping_run(data: &Path) -> Child {
    let mut child = run_cmd(
        data,
        &GVISOR,
        &["/bin/sh", "-c", "echo started; exec sleep 600"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("spawn sandboxd run");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the run's output");
    assert_eq!(line, "started\n", "the command runs");
    child
}

/// The run's sandbox and its worker's pid, from its owner mark.
fn the_run(data: &Path) -> (Uuid, i32) {
    let marks: Vec<(Uuid, i32)> = std::fs::read_dir(data.join("sandboxes"))
        .expect("sandboxes")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = Uuid::parse_str(name.strip_suffix(".run-owner")?).ok()?;
            let text = std::fs::read_to_string(e.path()).ok()?;
            let pid = text.lines().find_map(|l| l.strip_prefix("pid "))?;
            Some((id, pid.trim().parse().ok()?))
        })
        .collect();
    assert_eq!(marks.len(), 1, "one run's owner mark: {marks:?}");
    marks[0]
}

fn sigkill(pid: i32) {
    // SAFETY: kill(2) on a pid this test started (directly or as its run's worker).
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Kills the run and its worker with SIGKILL; returns the sandbox, whose sentry runs on.
fn kill_run(data: &Path, mut run: Child) -> Uuid {
    let (id, worker) = the_run(data);
    sigkill(worker);
    sigkill(run.id() as i32);
    run.wait().expect("reap the run");
    let dead = serve_bin::wait_for_runs(data);
    assert_eq!(dead.len(), 1, "the killed run's mark is free: {dead:?}");
    assert!(
        !processes_naming(&id.to_string()).is_empty(),
        "the sentry runs on after its run's death (else this test shows nothing)"
    );
    id
}

/// What the host and the data dir still hold of sandbox `id` (empty: nothing).
fn leftovers(data: &Path, id: Uuid) -> Vec<String> {
    let sid = id.to_string();
    let mut left: Vec<String> = processes_naming(&sid)
        .into_iter()
        .map(|pid| format!("process {pid}"))
        .collect();
    let sandboxes = data.join("sandboxes");
    for name in [sid.clone(), format!("{sid}.run-owner")] {
        if sandboxes.join(&name).exists() {
            left.push(format!("sandboxes/{name}"));
        }
    }
    left.extend(
        common::mounts_under(data)
            .into_iter()
            .map(|m| format!("mount {m}")),
    );
    if let Ok(files) = std::fs::read_dir(data.join("runsc")) {
        for f in files.flatten() {
            if f.file_name().to_string_lossy().contains(&sid) {
                left.push(format!("runsc state {}", f.path().display()));
            }
        }
    }
    for ctrl in std::fs::read_dir("/sys/fs/cgroup")
        .expect("cgroup root")
        .flatten()
    {
        let dir = ctrl.path().join("sandboxd").join(&sid);
        if dir.exists() {
            left.push(format!("cgroup {}", dir.display()));
        }
    }
    match SqliteStore::open(data.join("sandboxd.db")).map(|s| s.get_sandbox(id)) {
        Ok(Ok(Some(rec))) if rec.status == "TERMINATED" => {}
        Ok(Ok(Some(rec))) => left.push(format!("store record {}", rec.status)),
        other => left.push(format!("store record: {:?}", other.map(|r| r.map(|_| ())))),
    }
    left
}

/// The next run (`args`) on `data` succeeds and, with its own teardown, leaves nothing
/// of sandbox `id`.
fn next_run_ends(data: &Path, id: Uuid, args: &[&str]) {
    let next = run_cmd(data, args, &["/bin/true"])
        .output()
        .expect("the next run");
    assert_eq!(next.status.code(), Some(0), "{next:?}");
    assert_eq!(
        serve_bin::wait_for_runs(data),
        Vec::<std::path::PathBuf>::new(),
        "no dead run's mark is left"
    );
    let left = leftovers(data, id);
    assert!(left.is_empty(), "the killed run's sandbox left: {left:#?}");
}

#[test]
fn a_gvisor_run_killed_outright_is_ended_by_the_next_run() {
    let Some(data) = gvisor_server::gvisor_data() else {
        return;
    };
    let run = start_sleeping_run(&data.path);
    let id = kill_run(&data.path, run);
    next_run_ends(&data.path, id, &GVISOR);
}

/// Migration: binaries before the merge of the two killed-run mechanisms marked a
/// gVisor run's sandbox only with a `runs/<uuid>` marker (`pid N`, `sandbox ID`). Played
/// here by replacing the killed run's owner mark with such a marker; the next run (on
/// the container tier) must still end that sandbox, and remove the marker and `runs/`.
#[test]
fn an_older_binarys_runs_marker_still_ends_its_gvisor_sandbox() {
    let Some(data) = gvisor_server::gvisor_data() else {
        return;
    };
    let run = start_sleeping_run(&data.path);
    let (id, worker) = the_run(&data.path);
    let id_killed = kill_run(&data.path, run);
    assert_eq!(id, id_killed);
    std::fs::remove_file(data.path.join("sandboxes").join(format!("{id}.run-owner")))
        .expect("remove the owner mark");
    let runs = data.path.join("runs");
    std::fs::create_dir(&runs).expect("runs/");
    std::fs::write(
        runs.join(Uuid::new_v4().to_string()),
        format!("pid {worker}\nsandbox {id}\n"),
    )
    .expect("an older binary's marker");
    next_run_ends(&data.path, id, &["--network", "none"]);
    assert!(!runs.exists(), "runs/ is removed once its markers are");
}

/// A server starting beside a gVisor run still creating its sandbox (no record yet)
/// leaves that sandbox's runsc container alone: its owner mark is held. The create is
/// held up after `runsc start` (`start.gvisor.handle`).
#[test]
fn a_server_starting_beside_a_gvisor_run_mid_create_leaves_its_sandbox() {
    let Some(data) = gvisor_server::gvisor_data() else {
        return;
    };
    let child = run_cmd(&data.path, &GVISOR, &["/bin/sh", "-c", "echo ran; exit 3"])
        .env("SANDBOXD_FAILPOINTS", "start.gvisor.handle=sleep(6000)")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sandboxd run");
    // Its runsc container exists (runsc's state under the data dir) and its mark too.
    let runsc = data.path.join("runsc");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_dir(&runsc).is_ok_and(|d| d.flatten().any(|e| e.path().is_file())) {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never made its runsc container"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Started (its start-up reconcile done) and stopped while the create is held up.
    drop(serve_bin::Server::start_with_env(
        &data.path,
        None,
        &[("SANDBOXD_WARM_INITS", "0")],
    ));
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        (out.status.code(), out.stdout.as_slice()),
        (Some(3), &b"ran\n"[..]),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        serve_bin::wait_for_runs(&data.path),
        Vec::<std::path::PathBuf>::new()
    );
}
