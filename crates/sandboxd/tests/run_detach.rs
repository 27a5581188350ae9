//! `sandboxd run` returns once its command is done and a detached worker tears the
//! sandbox down: the output is complete and in order at the return, Ctrl-C ends the
//! command and its sandbox, two runs at once both finish clean, and what a run killed
//! outright, or a worker killed -9 mid-teardown, leaves is ended by the next run (no
//! mount, loop device, cgroup, process, sandbox dir or live record left).

mod serve_bin;

use sandboxd_store::{SandboxFilter, SqliteStore, Store};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// `sandboxd run --network none --data-dir DATA -- argv…`, not yet started.
fn run_cmd(data: &Path, argv: &[&str]) -> Command {
    let mut cmd = Command::new(serve_bin::BIN);
    cmd.args(["run", "--network", "none", "--data-dir"])
        .arg(data)
        .arg("--")
        .args(argv)
        .env_remove("SANDBOXD_DATA_DIR")
        .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
        .stdin(Stdio::null());
    cmd
}

/// Starts a run whose command prints `ready` first, and waits for that line.
fn start_ready(data: &Path, script: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = run_cmd(data, &["/bin/sh", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn sandboxd run");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line)
        .expect("read the command's first line");
    assert_eq!(line, "ready\n", "the command started");
    (child, out)
}

/// The runs' owner marks (`sandboxes/<id>.run-owner`, whose `pid` line names the run's
/// worker): (worker pid, sandbox id).
fn markers(data: &Path) -> Vec<(i32, Option<uuid::Uuid>)> {
    let Ok(dir) = std::fs::read_dir(data.join("sandboxes")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = uuid::Uuid::parse_str(name.strip_suffix(".run-owner")?).ok()?;
            let text = std::fs::read_to_string(e.path()).ok()?;
            let pid = text
                .lines()
                .find_map(|l| l.strip_prefix("pid "))
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or(0);
            Some((pid, Some(id)))
        })
        .collect()
}

fn sigkill(pid: i32) {
    // SAFETY: kill(2) on a pid this test started (directly or as its run's worker).
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Mount points at or under `data`.
fn mounts_under(data: &Path) -> Vec<String> {
    let prefix = data.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
        .filter(|m| m.starts_with(&prefix))
        .collect()
}

/// Loop devices whose backing file lies under `data`.
fn loops_under(data: &Path) -> Vec<String> {
    let data = data.display().to_string();
    std::fs::read_dir("/sys/block")
        .expect("/sys/block")
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("loop/backing_file"))
                .is_ok_and(|f| f.starts_with(&data))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The cgroup directories of sandbox `id` that exist (any hierarchy, v1 or v2).
fn cgroups_of(id: &str) -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut dirs = vec![root.join("sandboxd").join(id)];
    if let Ok(ctrls) = std::fs::read_dir(root) {
        dirs.extend(
            ctrls
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("sandboxd").join(id)),
        );
    }
    dirs.into_iter().filter(|d| d.exists()).collect()
}

/// Waits for every run's teardown, then checks that nothing of any sandbox is left
/// under `data` or on the host, and that every record ended; returns the record count.
fn assert_clean(data: &Path) -> usize {
    assert_eq!(
        serve_bin::wait_for_runs(data),
        Vec::<PathBuf>::new(),
        "no dead run's marker is left"
    );
    let left: Vec<_> = std::fs::read_dir(data.join("sandboxes"))
        .expect("sandboxes")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "sandbox dirs left: {left:?}");
    assert_eq!(mounts_under(data), Vec::<String>::new(), "mounts left");
    assert_eq!(loops_under(data), Vec::<String>::new(), "loop devices left");
    let store = SqliteStore::open(data.join("sandboxd.db")).expect("store");
    let all = store
        .list_sandboxes("default", SandboxFilter::default(), 100, None)
        .expect("list");
    for sb in &all {
        assert_eq!(sb.status, "TERMINATED", "sandbox {}", sb.id);
        let id = sb.id.to_string();
        assert_eq!(cgroups_of(&id), Vec::<PathBuf>::new(), "cgroups of {id}");
    }
    all.len()
}

fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().canonicalize().expect("canonical");
    (dir, path)
}

#[test]
fn a_fast_writers_output_is_complete_and_in_order_when_the_run_returns() {
    let (_keep, data) = data_dir();
    let script = "i=0; while [ $i -lt 20000 ]; do echo $i; i=$((i+1)); done; \
                  echo to-stderr >&2; head -c 3000000 /dev/zero; exit 7";
    let out = run_cmd(&data, &["/bin/sh", "-c", script])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = Vec::new();
    for i in 0..20000 {
        want.extend_from_slice(format!("{i}\n").as_bytes());
    }
    want.extend(std::iter::repeat_n(0u8, 3_000_000));
    assert_eq!(out.stdout.len(), want.len(), "every byte of stdout");
    assert!(out.stdout == want, "stdout in order");
    assert!(String::from_utf8_lossy(&out.stderr).contains("to-stderr\n"));
    assert_eq!(assert_clean(&data), 1);
}

#[test]
fn two_runs_at_once_both_finish_and_leave_nothing() {
    let (_keep, data) = data_dir();
    let a = run_cmd(&data, &["/bin/sh", "-c", "echo a; exit 1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn a");
    let b = run_cmd(&data, &["/bin/sh", "-c", "echo b; exit 2"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn b");
    let (a, b) = (
        a.wait_with_output().expect("a"),
        b.wait_with_output().expect("b"),
    );
    assert_eq!(
        (a.status.code(), a.stdout.as_slice()),
        (Some(1), &b"a\n"[..])
    );
    assert_eq!(
        (b.status.code(), b.stdout.as_slice()),
        (Some(2), &b"b\n"[..])
    );
    assert_eq!(assert_clean(&data), 2);
}

/// A run's worker, before it lets go of its owner mark, makes the next run's spare disk
/// and removes its own disk image (and earlier runs'), rather than doing that work beside
/// its start: once the runs are over, the data dir holds the template's two spares and
/// no discarded image, so the disk space is back.
#[test]
fn a_finished_run_leaves_spare_disks_ready_and_no_discarded_image() {
    let (_keep, data) = data_dir();
    for _ in 0..2 {
        let out = run_cmd(&data, &["/bin/true"]).output().expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(assert_clean(&data), 2);
    let trash: Vec<_> = std::fs::read_dir(data.join("disk-trash"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(trash, Vec::<PathBuf>::new(), "discarded disk images left");
    let spares = std::fs::read_dir(data.join("disk-templates"))
        .expect("templates")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".img.spare-"))
        .count();
    assert_eq!(spares, 2, "the next run's spare disks");
}

/// Regression: a run ended by Ctrl-C (SIGINT to the process the shell waits for) used
/// to die at once and leave its sandbox running, recorded RUNNING, with its mounts.
#[test]
fn ctrl_c_ends_the_command_and_its_sandbox() {
    let (_keep, data) = data_dir();
    let (child, _out) = start_ready(&data, "echo ready; exec sleep 1000");
    // SAFETY: kill(2) on the child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait_with_output().expect("wait").status;
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGINT),
        "ends by its Ctrl-C: {status:?}"
    );
    assert_eq!(assert_clean(&data), 1);
}

/// Regression: a run killed -9 while its command ran (the process the shell waits for
/// and its worker) used to leave its sandbox for good; the next run ends it.
#[test]
fn a_run_killed_outright_is_ended_by_the_next_run() {
    let (_keep, data) = data_dir();
    let (mut child, _out) = start_ready(&data, "echo ready; exec sleep 1000");
    for (pid, _) in markers(&data) {
        sigkill(pid);
    }
    sigkill(child.id() as i32);
    child.wait().expect("wait");
    let next = run_cmd(&data, &["/bin/true"]).output().expect("next run");
    assert_eq!(next.status.code(), Some(0), "{next:?}");
    assert_eq!(assert_clean(&data), 2);
}

/// A worker killed -9 in the middle of its teardown (held up on purpose: this test pins
/// the sandbox's disk open, so the teardown waits for the loop device's release after
/// the sandbox's processes, cgroups and mounts are gone) leaves a marker; the next run
/// finishes that teardown.
#[test]
fn a_worker_killed_mid_teardown_is_finished_by_the_next_run() {
    let (_keep, data) = data_dir();
    let mut caught = 0;
    for _ in 0..3 {
        let script = "echo ready; while [ ! -e /workspace/go ]; do sleep 0.02; done; echo done";
        let (child, mut out) = start_ready(&data, script);
        let found = markers(&data);
        let live: Vec<_> = found.iter().filter(|(_, id)| id.is_some()).collect();
        assert_eq!(live.len(), 1, "one live run: {found:?}");
        let (worker, id) = (live[0].0, live[0].1.expect("recorded"));
        let state = data.join("sandboxes").join(id.to_string());
        let handle: serde_json::Value =
            serde_json::from_slice(&std::fs::read(state.join("handle.json")).expect("handle"))
                .expect("handle json");
        let agent = handle["agent_pid"].as_i64().expect("agent pid");
        let workspace = PathBuf::from(format!("/proc/{agent}/root/workspace"));
        let pin = std::fs::File::open(&workspace).expect("pin the sandbox's disk");
        std::fs::write(workspace.join("go"), b"").expect("go");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).expect("rest of the output");
        assert_eq!(rest, "done\n");
        let status = child.wait_with_output().expect("wait").status;
        assert_eq!(status.code(), Some(0));
        // The teardown reaches the disk's release: cgroups and mounts gone.
        let id = id.to_string();
        while (!cgroups_of(&id).is_empty() || !mounts_under(&state).is_empty())
            && state.join("handle.json").exists()
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        sigkill(worker);
        let dead = serve_bin::wait_for_runs(&data);
        drop(pin);
        caught += usize::from(!dead.is_empty());
        if caught > 0 {
            break;
        }
    }
    assert!(caught > 0, "no worker was caught mid-teardown in 3 tries");
    let next = run_cmd(&data, &["/bin/true"]).output().expect("next run");
    assert_eq!(next.status.code(), Some(0), "{next:?}");
    assert!(assert_clean(&data) >= 2);
}

/// Regression: `kill -9` of the process the caller waits for (a supervisor's timeout)
/// used to leave the sandbox and its command running for good; now the worker ends the
/// command and tears the sandbox down by itself.
#[test]
fn killing_the_waiting_process_ends_the_command_and_its_sandbox() {
    let (_keep, data) = data_dir();
    let (mut child, _out) = start_ready(&data, "echo ready; exec sleep 1000");
    sigkill(child.id() as i32);
    child.wait().expect("wait");
    assert_eq!(assert_clean(&data), 1);
}

/// Regression: a run started with SIGHUP ignored (`nohup sandboxd run …`, or `&` in a
/// script) was ended by the SIGHUP it ignores: the waiting process blocked it (a blocked
/// signal queues even when ignored) and forwarded it, and the worker's handler replaced
/// the inherited SIG_IGN. Now the signal reaches neither, and the command finishes.
#[test]
fn an_ignored_sighup_leaves_the_run_alone() {
    use std::os::unix::process::CommandExt;
    let (_keep, data) = data_dir();
    let script = "echo ready; while [ ! -e /workspace/go ]; do sleep 0.02; done; echo done; exit 5";
    let mut cmd = run_cmd(&data, &["/bin/sh", "-c", script]);
    cmd.stdout(Stdio::piped());
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn sandboxd run");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("first line");
    assert_eq!(line, "ready\n");
    let found = markers(&data);
    let live: Vec<_> = found.iter().filter(|(_, id)| id.is_some()).collect();
    assert_eq!(live.len(), 1, "one live run: {found:?}");
    let (worker, id) = (live[0].0, live[0].1.expect("recorded"));
    // A hangup reaches the whole foreground group: the waiting process and the worker.
    for pid in [child.id() as i32, worker] {
        // SAFETY: kill(2) on the run this test started and its worker.
        unsafe { libc::kill(pid, libc::SIGHUP) };
    }
    let state = data.join("sandboxes").join(id.to_string());
    let handle: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("handle.json")).expect("handle"))
            .expect("handle json");
    let agent = handle["agent_pid"].as_i64().expect("agent pid");
    std::fs::write(format!("/proc/{agent}/root/workspace/go"), b"").expect("go");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("rest of the output");
    let status = child.wait().expect("wait");
    assert_eq!(
        (status.code(), rest.as_str()),
        (Some(5), "done\n"),
        "{status:?}"
    );
    assert_eq!(assert_clean(&data), 1);
}

/// Regression: the two sweeps of killed runs took different locks (the `runs/` marker's,
/// the sandbox's `run-owner` mark's), so two processes could destroy one dead run's sandbox
/// at once; now the owner mark is the only one. Here the test holds the owner mark of a
/// killed run's sandbox, as a sweeper ending it would: the next run must leave that
/// sandbox alone, and the run after the lock's release ends it.
#[test]
fn a_dead_runs_sandbox_held_by_a_sweeper_is_left_to_it() {
    use nix::fcntl::{Flock, FlockArg};
    let (_keep, data) = data_dir();
    let (mut child, _out) = start_ready(&data, "echo ready; exec sleep 1000");
    let found = markers(&data);
    let id = found.iter().find_map(|(_, id)| *id).expect("recorded");
    for (pid, _) in &found {
        sigkill(*pid);
    }
    sigkill(child.id() as i32);
    child.wait().expect("wait");
    // The worker's lock goes when the kernel has ended it: wait for that.
    serve_bin::wait_for_runs(&data);
    let state = data.join("sandboxes").join(id.to_string());
    let mark = data.join("sandboxes").join(format!("{id}.run-owner"));
    let owner = std::fs::File::open(&mark).expect("owner mark");
    let held = Flock::lock(owner, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .expect("the dead run's owner mark is free");
    let next = run_cmd(&data, &["/bin/true"]).output().expect("next run");
    assert_eq!(next.status.code(), Some(0), "{next:?}");
    // The next run's detached worker has swept (or skipped) by the time it ends.
    serve_bin::wait_for_runs_but(&data, Some(&mark));
    assert!(
        state.join("handle.json").exists(),
        "a sandbox another sweeper holds was destroyed"
    );
    drop(held);
    let last = run_cmd(&data, &["/bin/true"]).output().expect("last run");
    assert_eq!(last.status.code(), Some(0), "{last:?}");
    assert_eq!(assert_clean(&data), 3);
}

/// Spawns a run of `script` whose create is held up in the runtime for 4 s
/// (`start.handle`, after the state dir and the run's owner mark are made), and returns
/// once that sandbox dir with its mark exists.
fn start_held_in_create(data: &Path, script: &str, stdout: Stdio, stderr: Stdio) -> Child {
    let child = run_cmd(data, &["/bin/sh", "-c", script])
        .env("SANDBOXD_FAILPOINTS", "start.handle=sleep(4000)")
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("spawn sandboxd run");
    let sandboxes = data.join("sandboxes");
    // A sandbox dir beside its run's owner mark.
    let owned = |d: std::fs::DirEntry| {
        let name = d.file_name().to_string_lossy().into_owned();
        name.strip_suffix(".run-owner")
            .is_some_and(|id| !id.starts_with('.') && sandboxes.join(id).is_dir())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_dir(&sandboxes).is_ok_and(|d| d.flatten().any(owned)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never made its sandbox dir"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child
}

/// Regression: Ctrl-C while the sandbox was being created (or its image pulled) killed
/// the worker outright (no handler yet), leaving a half-made sandbox for the next run.
/// Now the create finishes, the sandbox is destroyed and the run ends by its Ctrl-C.
/// The create is held up in the runtime (`start.handle`, after the state dir is made).
#[test]
fn ctrl_c_during_the_create_ends_the_run_and_its_sandbox() {
    let (_keep, data) = data_dir();
    let child = start_held_in_create(&data, "echo ran", Stdio::piped(), Stdio::inherit());
    // SAFETY: kill(2) on the child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("wait");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        (out.status.signal(), out.stdout.as_slice()),
        (Some(libc::SIGINT), &b""[..]),
        "ends by its Ctrl-C, before the command: {:?}",
        out.status
    );
    assert_eq!(assert_clean(&data), 1);
}

/// Regression: the waiting process killed -9 while the sandbox was being created sent
/// the worker its parent-death SIGTERM before it caught any signal, so it died with no
/// teardown. Now the create finishes and the worker destroys the sandbox by itself.
#[test]
fn killing_the_waiting_process_during_the_create_ends_the_sandbox() {
    let (_keep, data) = data_dir();
    let mut child = start_held_in_create(&data, "echo ran", Stdio::null(), Stdio::inherit());
    sigkill(child.id() as i32);
    child.wait().expect("wait");
    assert_eq!(assert_clean(&data), 1);
}

/// Regression: a server starting beside a run still creating its sandbox removed that
/// sandbox's dir (no live record claimed it yet) under the run. A sandbox whose owner
/// mark a live run holds is now left to that run.
#[test]
fn a_server_starting_beside_a_run_mid_create_leaves_its_sandbox() {
    let (_keep, data) = data_dir();
    let child = start_held_in_create(&data, "echo ran; exit 3", Stdio::piped(), Stdio::piped());
    // Started (its start-up reconcile done) and stopped while the create is held up.
    // (No warm pool: a stopped server keeps its entries for the next.)
    drop(serve_bin::Server::start_with_env(
        &data,
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
    assert_eq!(assert_clean(&data), 1);
}

/// Regression: Ctrl-\ (SIGQUIT) to a run made the waiting process, re-raising it to end
/// by it, dump core (into the caller's directory, when core files are allowed). It
/// still ends by SIGQUIT, with no core.
#[test]
fn ctrl_backslash_ends_the_run_without_a_core_dump() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let (_keep, data) = data_dir();
    let cwd = tempfile::tempdir().expect("the caller's directory");
    let mut cmd = run_cmd(&data, &["/bin/sh", "-c", "echo ready; exec sleep 1000"]);
    cmd.stdout(Stdio::piped()).current_dir(cwd.path());
    // SAFETY: only setrlimit(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &unlimited);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn sandboxd run");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("first line");
    assert_eq!(line, "ready\n");
    // SAFETY: kill(2) on the child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGQUIT) };
    let status = child.wait().expect("wait");
    assert_eq!(
        (status.signal(), status.core_dumped()),
        (Some(libc::SIGQUIT), false),
        "{status:?}"
    );
    assert_eq!(assert_clean(&data), 1);
}

/// Regression: a caller that ignores SIGTERM (`trap '' TERM`, inherited by the run) and
/// then kills the waiting process with -9 left the command running: the worker's
/// parent-death signal was SIGTERM, which it ignored too. The worker now has a death
/// signal of its own that it always handles, and ends the command and its sandbox.
#[test]
fn killing_the_waiting_process_of_a_caller_ignoring_sigterm_ends_the_command() {
    let (_keep, data) = data_dir();
    let run = format!(
        "trap '' TERM; exec {} run --network none --data-dir {} -- \
         /bin/sh -c 'echo ready; exec sleep 1000'",
        serve_bin::BIN,
        data.display()
    );
    let mut child = Command::new("/bin/sh")
        .args(["-c", &run])
        .env_remove("SANDBOXD_DATA_DIR")
        .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the shell");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the command's first line");
    assert_eq!(line, "ready\n", "the command started");
    let found = markers(&data);
    assert_eq!(found.len(), 1, "one run: {found:?}");
    sigkill(child.id() as i32);
    child.wait().expect("wait");
    wait_for_no_markers(&data);
    assert_eq!(assert_clean(&data), 1);
}

/// A caller that blocks the worker's parent-death signal (a mask inherited across exec,
/// as `Command` passes it on) and then kills the waiting process with -9: the worker
/// unblocks the signals that end a run at its start, so its death signal still ends the
/// command and its sandbox (with SIGUSR2 left blocked it would stay pending for ever).
#[test]
fn killing_the_waiting_process_of_a_caller_blocking_signals_ends_the_command() {
    use std::os::unix::process::CommandExt;
    let (_keep, data) = data_dir();
    let mut cmd = Command::new(serve_bin::BIN);
    cmd.args(["run", "--network", "none", "--data-dir"])
        .arg(&data)
        .args(["--", "/bin/sh", "-c", "echo ready; exec sleep 1000"])
        .env_remove("SANDBOXD_DATA_DIR")
        .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    // SAFETY: sigprocmask between fork and exec only changes the child's own mask
    // (async-signal-safe).
    unsafe {
        cmd.pre_exec(|| {
            let mut set = nix::sys::signal::SigSet::empty();
            for sig in [
                nix::sys::signal::Signal::SIGUSR2,
                nix::sys::signal::Signal::SIGTERM,
                nix::sys::signal::Signal::SIGINT,
            ] {
                set.add(sig);
            }
            set.thread_block().map_err(std::io::Error::from)
        })
    };
    let mut child = cmd.spawn().expect("spawn the run");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the command's first line");
    assert_eq!(line, "ready\n", "the command started");
    sigkill(child.id() as i32);
    child.wait().expect("wait");
    wait_for_no_markers(&data);
    assert_eq!(assert_clean(&data), 1);
}

/// Waits (bounded) until no run's owner mark is left: with the command running on, the
/// worker never lets its mark go.
fn wait_for_no_markers(data: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !markers(data).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command still runs a minute after its run was killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
