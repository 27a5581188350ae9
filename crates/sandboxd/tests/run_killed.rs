//! A `sandboxd run` killed with SIGKILL mid-command leaves nothing running: its
//! sandbox's processes end with it, and the rest (state dir, mounts, loop device,
//! cgroups, network namespace, network lease, the store's RUNNING record) is removed by
//! the next run on the data dir, or within seconds by a server running beside it.
//! With egress and without, with and without a server.

mod serve_bin;

use sandboxd_store::{SqliteStore, Store};
use serve_bin::{Server, BIN};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How long anything polled here may take on a loaded machine.
const BOUND: Duration = Duration::from_secs(120);

/// `sandboxd run` on `data` with `network`, `argv` after `--`.
fn run_cmd(data: &Path, network: &str, argv: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--network", network, "--data-dir"])
        .arg(data)
        .arg("--")
        .args(argv)
        .env_remove("SANDBOXD_DATA_DIR")
        .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
        // A network the sweep parks is removed soon after (not in 30 s).
        .env("SANDBOXD_NET_LINGER_SECS", "1")
        .stdin(Stdio::null());
    cmd
}

/// Starts a run whose command prints `started` then sleeps, and waits for the line.
fn start_sleeping_run(data: &Path, network: &str) -> Child {
    let mut child = run_cmd(
        data,
        network,
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

/// Polls `done` until it holds, or panics with `what` after [`BOUND`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < BOUND, "still after {BOUND:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The only sandbox dir of the data dir (the run's).
fn the_sandbox(data: &Path) -> Uuid {
    let ids: Vec<Uuid> = std::fs::read_dir(data.join("sandboxes"))
        .expect("sandboxes dir")
        .filter_map(|e| Uuid::parse_str(e.ok()?.file_name().to_str()?).ok())
        .collect();
    assert_eq!(ids.len(), 1, "one sandbox: {ids:?}");
    ids[0]
}

/// (pid, start time) of every process in a cgroup named `id`.
fn processes_of(id: Uuid) -> Vec<(i32, String)> {
    let id = id.to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(&id))
        })
        .filter_map(|pid| Some((pid, start_time(pid)?)))
        .collect()
}

/// Field 22 of /proc/PID/stat.
fn start_time(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19).map(str::to_owned)
}

/// What the host holds of sandbox `id` of `data`, as readable names (empty: nothing).
fn leftovers(data: &Path, id: Uuid, netns: &str, loops: &[String]) -> Vec<String> {
    let mut left = Vec::new();
    let sid = id.to_string();
    if data.join("sandboxes").join(&sid).exists() {
        left.push("state dir".into());
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    for line in mounts
        .lines()
        .filter(|l| l.contains(&sid) || l.contains(netns))
    {
        left.push(format!("mount {line}"));
    }
    // Its disk's device, unless detached or reused by another sandbox's disk (its
    // image keeps its name when deleted, and goes to the trash when a run removes it).
    for dev in loops {
        let backing = std::fs::read_to_string(format!("/sys/block/{dev}/loop/backing_file"));
        if backing.is_ok_and(|f| f.contains(&sid) || f.contains("/disk-trash/")) {
            left.push(format!("loop device {dev}"));
        }
    }
    for cg in cgroup_dirs(id) {
        left.push(format!("cgroup {}", cg.display()));
    }
    for (pid, _) in processes_of(id) {
        left.push(format!("process {pid}"));
    }
    if processes_in_netns(netns) > 0 {
        left.push(format!("processes in {netns}"));
    }
    let net = Path::new("/run/sandboxd/net");
    for kind in ["leases", "parked"] {
        if net.join(kind).join(&sid).exists() {
            left.push(format!("network {kind}/{sid}"));
        }
    }
    match SqliteStore::open(data.join("sandboxd.db")).map(|s| s.get_sandbox(id)) {
        Ok(Ok(Some(rec))) if rec.status == "TERMINATED" => {}
        Ok(Ok(Some(rec))) => left.push(format!("store record {}", rec.status)),
        other => left.push(format!("store record: {:?}", other.map(|r| r.map(|_| ())))),
    }
    left
}

/// Loop devices backed by a file of sandbox `id`'s state dir.
fn loops_of(id: Uuid) -> Vec<String> {
    let sid = id.to_string();
    std::fs::read_dir("/sys/block")
        .expect("/sys/block")
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("loop/backing_file"))
                .is_ok_and(|f| f.contains(&sid))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Directories of cgroups named `id`, under any hierarchy's `sandboxd` parent.
fn cgroup_dirs(id: Uuid) -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut candidates = vec![root.join("sandboxd").join(id.to_string())];
    for e in std::fs::read_dir(root).expect("/sys/fs/cgroup").flatten() {
        candidates.push(e.path().join("sandboxd").join(id.to_string()));
    }
    candidates.into_iter().filter(|p| p.exists()).collect()
}

/// Processes of the host in network namespace `netns` (`net:[INODE]`).
fn processes_in_netns(netns: &str) -> usize {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_link(e.path().join("ns/net")).is_ok_and(|l| l.to_string_lossy() == netns)
        })
        .count()
}

/// Kills a sleeping run with SIGKILL (beside a server if `server`), checks its
/// sandbox's processes end on their own, and that the rest goes: by the next run, or
/// by the server.
fn killed_run_leaves_nothing(network: &str, server: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().canonicalize().expect("canonical");
    let server = server.then(|| {
        Server::start_with_env(
            &data,
            None,
            &[
                ("SANDBOXD_NETWORK", network),
                ("SANDBOXD_NET_LINGER_SECS", "1"),
            ],
        )
    });
    let mut run = start_sleeping_run(&data, network);
    let id = the_sandbox(&data);
    let procs = processes_of(id);
    assert!(procs.len() >= 2, "the agent and the command: {procs:?}");
    let netns = std::fs::read_link(format!("/proc/{}/ns/net", procs[0].0))
        .expect("the sandbox's netns")
        .to_string_lossy()
        .into_owned();
    assert!(!cgroup_dirs(id).is_empty(), "the sandbox has its cgroups");
    let loops = loops_of(id);
    assert!(!loops.is_empty(), "the sandbox has its disk");

    run.kill().expect("SIGKILL the run");
    run.wait().expect("reap the run");
    wait_until("the killed run's sandbox processes end", || {
        procs
            .iter()
            .all(|(pid, t)| start_time(*pid).as_ref() != Some(t))
    });

    if server.is_none() {
        let next = run_cmd(&data, network, &["/bin/true"])
            .output()
            .expect("the next run");
        assert_eq!(next.status.code(), Some(0), "{next:?}");
    }
    let mut left = Vec::new();
    let start = Instant::now();
    while start.elapsed() < BOUND {
        left = leftovers(&data, id, &netns, &loops);
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(left.is_empty(), "the killed run's sandbox left: {left:#?}");
    drop(server);
    // The next run's own teardown is detached: let it end before the data dir goes
    // (else it can make `disk-trash` in a dir being removed, and the temp dir stays).
    serve_bin::wait_for_runs(&data);
}

#[test]
fn a_killed_egress_run_leaves_nothing_after_the_next_run() {
    killed_run_leaves_nothing("egress", false);
}

#[test]
fn a_killed_offline_run_leaves_nothing_after_the_next_run() {
    killed_run_leaves_nothing("none", false);
}

#[test]
fn a_killed_egress_run_beside_a_server_leaves_nothing() {
    killed_run_leaves_nothing("egress", true);
}

#[test]
fn a_killed_offline_run_beside_a_server_leaves_nothing() {
    killed_run_leaves_nothing("none", true);
}

/// Under a quota of one sandbox, the run after a killed one still runs: the killed run's
/// sandbox, still RUNNING in the store, counts against the quota until the sweep ends
/// it, so a create refused meanwhile is tried again once the sweep is done. (With the
/// sweep beside the create and no second try, the next run failed with the quota.)
#[test]
fn the_run_after_a_killed_one_gets_the_quota_its_sandbox_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().canonicalize().expect("canonical");
    let mut run = start_sleeping_run(&data, "none");
    let id = the_sandbox(&data);
    let quota = Command::new(BIN)
        .args(["quota", "set", "--sandboxes", "1", "--workspace", "default"])
        .arg("--data-dir")
        .arg(&data)
        .env_remove("SANDBOXD_DATA_DIR")
        .output()
        .expect("sandboxd quota set");
    assert!(quota.status.success(), "{quota:?}");
    let procs = processes_of(id);
    // The run and its worker, so that nothing tears the sandbox down but a sweep.
    let workers = children_of(run.id());
    assert_eq!(workers.len(), 1, "the run's worker: {workers:?}");
    for pid in [workers[0], run.id() as i32] {
        // SAFETY: kill(2) on processes this test started (the run and its worker).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    run.wait().expect("reap the run");
    wait_until("the killed run's sandbox processes end", || {
        procs
            .iter()
            .all(|(pid, t)| start_time(*pid).as_ref() != Some(t))
    });
    let next = run_cmd(&data, "none", &["/bin/echo", "ran"])
        .output()
        .expect("the next run");
    assert_eq!(
        (
            next.status.code(),
            String::from_utf8_lossy(&next.stdout).as_ref()
        ),
        (Some(0), "ran\n"),
        "{}",
        String::from_utf8_lossy(&next.stderr)
    );
    serve_bin::wait_for_runs(&data);
}

/// A server's own sandboxes are never taken for a killed run's: one made from a warm init
/// (whose dir carries the warm pool's `owner` file, not a run's mark) still runs after
/// several periods of the server's sweep of dead runs' sandboxes (every 5 s). The sweep
/// once read the warm pool's file as a run's free mark and ended such sandboxes.
#[test]
fn a_servers_sandbox_from_a_warm_init_outlives_the_dead_run_sweep() {
    const KEY: &str = "signkey-test-00112233445566778899aabbccddeeff";
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().canonicalize().expect("canonical");
    let server = Server::start_with_env(&data, Some(KEY), &[("SANDBOXD_NETWORK", "none")]);
    let id = server.create_sandbox(
        KEY,
        &serde_json::json!({"name": "kept", "vcpu": 1, "memoryMb": 256}),
    );
    let state = data.join("sandboxes").join(&id);
    assert!(
        state.join("owner").exists(),
        "the sandbox came from a warm init (its dir holds the pool's owner file)"
    );
    // Three sweep periods; no timing is asserted, only that the sandbox is still there.
    std::thread::sleep(Duration::from_secs(16));
    let (code, out) = server.exec(KEY, &id, &["/bin/echo", "still here"]);
    assert_eq!((code, out.trim()), (0, "still here"));
    server.destroy(KEY, &id);
    drop(server);
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

/// A run killed (SIGKILL, its worker and its waiting process) in its start, while the
/// start waits for its early init (held by a failpoint) with its egress network already
/// claimed or allocated: the next run removes that network's lease (and its entries
/// with it), ends the STARTING record, and nothing else of it is left (state dir,
/// owner mark, early init entry, mounts, loop devices, cgroups). The network state is
/// the host's: only the lease named after the killed run's sandbox is looked at.
#[test]
fn a_run_killed_in_its_start_leaves_no_lease_and_no_starting_record() {
    run_killed_in_its_start(false);
}

/// [`a_run_killed_in_its_start_leaves_no_lease_and_no_starting_record`], with a server
/// on the data dir sweeping instead of a next run.
#[test]
fn a_run_killed_in_its_start_beside_a_server_leaves_no_lease_and_no_starting_record() {
    run_killed_in_its_start(true);
}

fn run_killed_in_its_start(server: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().canonicalize().expect("canonical");
    // A first run makes the disk template, and parks its network for the next.
    let first = run_cmd(&data, "egress", &["/bin/true"])
        .output()
        .expect("the first run");
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    serve_bin::wait_for_runs(&data);

    let mut held = run_cmd(&data, "egress", &["/bin/true"])
        .env("SANDBOXD_FAILPOINTS", "warm.make=sleep(60000)")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the held run");
    let leases = Path::new("/run/sandboxd/net/leases");
    let mut id = None;
    wait_until("the held run's record and network lease", || {
        let starting = SqliteStore::open(data.join("sandboxd.db"))
            .ok()
            .and_then(|s| s.sandboxes_in_status(&["STARTING"]).ok())
            .unwrap_or_default();
        id = starting
            .iter()
            .map(|r| r.id)
            .find(|id| leases.join(id.to_string()).exists());
        id.is_some()
    });
    let id = id.expect("the held run's sandbox");
    // Killed before its state dir exists: the sweep has only the mark to go by.
    assert!(
        !data.join("sandboxes").join(id.to_string()).exists(),
        "the held start made its state dir"
    );
    let workers = children_of(held.id());
    assert_eq!(workers.len(), 1, "the held run's worker: {workers:?}");
    for pid in [workers[0], held.id() as i32] {
        // SAFETY: kill(2) on processes this test started (the run and its worker).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    held.wait().expect("reap the held run");

    let server = server.then(|| {
        Server::start_with_env(
            &data,
            None,
            &[
                ("SANDBOXD_NETWORK", "egress"),
                ("SANDBOXD_NET_LINGER_SECS", "1"),
            ],
        )
    });
    if server.is_none() {
        let next = run_cmd(&data, "none", &["/bin/true"])
            .output()
            .expect("the next run");
        assert_eq!(next.status.code(), Some(0), "{next:?}");
        serve_bin::wait_for_runs(&data);
    } else {
        // Within a sweep or two of the server's (every 5 s). Its mark goes last (the
        // lease may go first: the server takes back networks nothing keeps as it opens).
        let mark = data.join("sandboxes").join(format!("{id}.run-owner"));
        wait_until("the server sweeps the killed start", || {
            leftovers(&data, id, "net:[none]", &[]).is_empty() && !mark.exists()
        });
    }
    drop(server);
    let mut left = leftovers(&data, id, "net:[none]", &[]);
    let sandboxes = data.join("sandboxes");
    if sandboxes.join(format!("{id}.run-owner")).exists() {
        left.push("owner mark".into());
    }
    let warm: Vec<String> = std::fs::read_dir(&sandboxes)
        .expect("sandboxes dir")
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| n.starts_with(".warm-"))
        .collect();
    if !warm.is_empty() {
        left.push(format!("early init entries {warm:?}"));
    }
    let data_s = data.display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    for line in mounts.lines().filter(|l| l.contains(&data_s)) {
        left.push(format!("mount {line}"));
    }
    for e in std::fs::read_dir("/sys/block")
        .expect("/sys/block")
        .flatten()
    {
        let backing = std::fs::read_to_string(e.path().join("loop/backing_file"));
        if backing.is_ok_and(|f| f.contains(&data_s) && f.contains(".warm-")) {
            left.push(format!("loop device {:?}", e.file_name()));
        }
    }
    assert!(left.is_empty(), "the killed start left: {left:#?}");
}

/// A run killed (SIGKILL, its worker and its waiting process) just after its record is
/// written, before its start (held at the STARTING write by a failpoint): the next run
/// ends that PENDING record and nothing of the run is left (owner mark, early init
/// entry, mounts, loop devices). Before, its owner mark came only with the start, so
/// nothing ever ended such a record.
#[test]
fn a_run_killed_just_after_its_record_is_written_leaves_no_active_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().canonicalize().expect("canonical");
    // A first run makes the disk template and the store.
    let first = run_cmd(&data, "none", &["/bin/true"])
        .output()
        .expect("the first run");
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    serve_bin::wait_for_runs(&data);

    let mut held = run_cmd(&data, "none", &["/bin/true"])
        .env("SANDBOXD_FAILPOINTS", "store.save.STARTING=sleep(60000)")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the held run");
    let mut id = None;
    wait_until("the held run's PENDING record", || {
        id = SqliteStore::open(data.join("sandboxd.db"))
            .ok()
            .and_then(|s| s.sandboxes_in_status(&["PENDING"]).ok())
            .and_then(|r| r.first().map(|r| r.id));
        id.is_some()
    });
    let id = id.expect("the held run's sandbox");
    let workers = children_of(held.id());
    assert_eq!(workers.len(), 1, "the held run's worker: {workers:?}");
    for pid in [workers[0], held.id() as i32] {
        // SAFETY: kill(2) on processes this test started (the run and its worker).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    held.wait().expect("reap the held run");

    let next = run_cmd(&data, "none", &["/bin/true"])
        .output()
        .expect("the next run");
    assert_eq!(next.status.code(), Some(0), "{next:?}");
    serve_bin::wait_for_runs(&data);
    let mut left = leftovers(&data, id, "net:[none]", &[]);
    let sandboxes = data.join("sandboxes");
    if sandboxes.join(format!("{id}.run-owner")).exists() {
        left.push("owner mark".into());
    }
    let data_s = data.display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    for line in mounts.lines().filter(|l| l.contains(&data_s)) {
        left.push(format!("mount {line}"));
    }
    let entries: Vec<String> = std::fs::read_dir(&sandboxes)
        .expect("sandboxes dir")
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    if !entries.is_empty() {
        left.push(format!("sandboxes/ holds {entries:?}"));
    }
    assert!(left.is_empty(), "the killed run left: {left:#?}");
}
