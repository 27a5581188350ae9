//! A server's warm pool grown at its start (`warm_inits_start`): the entries are made
//! ahead of any create, a first burst takes them, and the stop drains every entry
//! (dirs, mounts, id slots, cgroups, wired networks).

mod common;
mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::path::Path;

const MASTER: &str = "warm-start-test-master-key-0123456789";
/// The pool's size from the start (the default base is 2).
const START: usize = 6;

/// Limits that admit the whole burst at once.
const ROOMY: [(&str, &str); 4] = [
    ("SANDBOXD_MAX_SANDBOXES", "64"),
    ("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", "64"),
    ("SANDBOXD_CREATE_RATE_BURST", "64"),
    ("SANDBOXD_WARM_INITS_START", "6"),
];

/// Keys of the warm entries under `data` (`.warm-<key>`), those marked ready only
/// when `ready`.
fn entries(data: &Path, ready: bool) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(data.join("sandboxes")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| !ready || e.path().join("ready").exists())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(".warm-").map(str::to_owned)
        })
        .collect()
}

/// No warm entry, and nothing mounted, is left under `data_dir`.
fn assert_no_entries(data_dir: &Path) {
    assert_eq!(
        entries(data_dir, false),
        Vec::<String>::new(),
        "entries left"
    );
    assert_eq!(
        common::mounts_under(&data_dir.join("sandboxes")),
        Vec::<String>::new()
    );
}

/// What entry `key` may have left on the host: its cgroups and its network lease.
fn host_traces(key: &str) -> Vec<String> {
    let mut left = Vec::new();
    for ctrl in std::fs::read_dir("/sys/fs/cgroup").expect("cgroup root") {
        let dir = ctrl.expect("controller").path().join("sandboxd").join(key);
        if dir.exists() {
            left.push(dir.display().to_string());
        }
    }
    let lease = Path::new("/run/sandboxd/net/leases").join(key);
    if lease.exists() {
        left.push(lease.display().to_string());
    }
    left
}

#[test]
fn a_server_grows_its_pool_at_start_a_burst_takes_it_and_the_stop_drains_it() {
    let data = tempfile::tempdir().expect("tempdir");
    let data_dir = data.path().canonicalize().expect("canonical");
    let server = Server::start_with_env(&data_dir, Some(MASTER), &ROOMY);
    // Before any create: the pool holds the start size of the default shape.
    common::wait_for("the pool grown at start", || {
        entries(&data_dir, true).len() >= START
    });
    let ahead = entries(&data_dir, true);
    let made: Vec<String> = std::thread::scope(|s| {
        let creates: Vec<_> = (0..START)
            .map(|i| {
                let server = &server;
                s.spawn(move || {
                    let body = json!({"name": format!("first-{i}"), "vcpu": 1, "memoryMb": 128});
                    server.create_sandbox(MASTER, &body)
                })
            })
            .collect();
        creates
            .into_iter()
            .map(|c| c.join().expect("a create of the burst"))
            .collect()
    });
    // The burst took entries made ahead (renamed into sandboxes; the refill is not
    // allowed to drop a fitting entry).
    let still = entries(&data_dir, false);
    let taken = ahead.iter().filter(|k| !still.contains(k)).count();
    let runs: Vec<(i64, String)> = made
        .iter()
        .map(|id| server.exec(MASTER, id, &["/bin/echo", "ok"]))
        .collect();
    for id in &made {
        server.destroy(MASTER, id);
    }
    assert!(
        taken >= START - 1,
        "the first burst took {taken} of the {} entries made ahead",
        ahead.len()
    );
    for (code, out) in &runs {
        assert_eq!((*code, out.trim()), (0, "ok"));
    }
    let before_stop = entries(&data_dir, false);
    drop(server);
    assert_no_entries(&data_dir);
    assert_eq!(common::slot_leases(&data_dir), Vec::<String>::new());
    let traces: Vec<String> = ahead
        .iter()
        .chain(&before_stop)
        .flat_map(|k| host_traces(k))
        .collect();
    assert_eq!(traces, Vec::<String>::new(), "cgroups or leases left");
}

#[test]
fn a_server_killed_while_filling_its_pool_leaves_nothing_once_restarted_and_stopped() {
    let data = tempfile::tempdir().expect("tempdir");
    let data_dir = data.path().canonicalize().expect("canonical");
    let env = [("SANDBOXD_WARM_INITS_START", "12")];
    let server = Server::start_with_env(&data_dir, Some(MASTER), &env);
    // Killed once a few entries are ready, while the rest are being made.
    common::wait_for("a first entries ready", || {
        entries(&data_dir, true).len() >= 2
    });
    server.kill9();
    let killed = entries(&data_dir, false);
    assert!(
        !killed.is_empty(),
        "the killed server left entries to sweep"
    );
    // The next server sweeps them before it listens, and fills a pool of its own.
    let server = Server::start_with_env(&data_dir, Some(MASTER), &env);
    let left: Vec<String> = entries(&data_dir, false)
        .into_iter()
        .filter(|k| killed.contains(k))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "the killed server's entries");
    let traces: Vec<String> = killed.iter().flat_map(|k| host_traces(k)).collect();
    assert_eq!(
        traces,
        Vec::<String>::new(),
        "the killed server's cgroups or leases"
    );
    common::wait_for("the new pool full", || entries(&data_dir, true).len() >= 12);
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "after", "vcpu": 1, "memoryMb": 128}),
    );
    assert_eq!(server.exec(MASTER, &id, &["/bin/echo", "ok"]).0, 0);
    server.destroy(MASTER, &id);
    let before_stop = entries(&data_dir, false);
    drop(server);
    assert_no_entries(&data_dir);
    assert_eq!(common::slot_leases(&data_dir), Vec::<String>::new());
    let traces: Vec<String> = before_stop.iter().flat_map(|k| host_traces(k)).collect();
    assert_eq!(traces, Vec::<String>::new(), "cgroups or leases left");
}

#[test]
fn a_server_killed_while_writing_an_entrys_owner_leaves_nothing_once_restarted() {
    let data = tempfile::tempdir().expect("tempdir");
    let data_dir = data.path().canonicalize().expect("canonical");
    // Every make stops while writing its owner mark (`warm.owner`).
    let env = [
        ("SANDBOXD_WARM_INITS_START", "2"),
        ("SANDBOXD_FAILPOINTS", "warm.owner=sleep(600000)"),
    ];
    let server = Server::start_with_env(&data_dir, Some(MASTER), &env);
    // The entries whose owner mark the server is writing: it holds a file open in their
    // dir (the owner file made and empty, or the mark's unnamed file not linked in yet).
    let pid = server.pid();
    let writing = || {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return Vec::new();
        };
        fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter_map(|target| {
                let target = target.to_string_lossy().into_owned();
                let rest = target.split("/sandboxes/.warm-").nth(1)?;
                Some(rest.split('/').next()?.to_owned())
            })
            .collect::<Vec<String>>()
    };
    common::wait_for("an entry's owner mark being written", || {
        !writing().is_empty()
    });
    let killed = writing();
    server.kill9();
    // The restarted server's start-up sweep removes it before it listens: a mark is
    // either absent or complete, so an entry without one is no live make's.
    let server = Server::start_with_env(&data_dir, Some(MASTER), &[]);
    let left: Vec<String> = entries(&data_dir, false)
        .into_iter()
        .filter(|k| killed.contains(k))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "the killed server's entries");
    let traces: Vec<String> = killed.iter().flat_map(|k| host_traces(k)).collect();
    assert_eq!(traces, Vec::<String>::new(), "their cgroups or leases");
    drop(server);
}

/// A SIGTERM while the server starts, its pool being made and before it listens, is a
/// graceful stop: it drains what it made. (The handlers were installed only once it
/// served: such a signal killed it at once, its entries' mounts, loop devices, cgroups
/// and leases left on the host.)
#[test]
fn a_server_stopped_while_it_starts_drains_what_it_made() {
    use std::os::unix::process::ExitStatusExt;
    let data = tempfile::tempdir().expect("tempdir");
    let data_dir = data.path().canonicalize().expect("canonical");
    let mut child = std::process::Command::new(serve_bin::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .env("SANDBOXD_MASTER_KEY", MASTER)
        .env("SANDBOXD_METRICS_LISTEN", "none")
        .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
        .env("SANDBOXD_WARM_INITS_START", "6")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn sandboxd serve");
    common::wait_for("a first warm entry in the making", || {
        !entries(&data_dir, false).is_empty()
    });
    let seen = entries(&data_dir, false);
    // SAFETY: kill(2) on the PID of our own, not yet reaped, child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("wait for the server");
    assert_eq!(status.signal(), None, "it died of the signal: {status}");
    assert!(status.success(), "{status}");
    assert_no_entries(&data_dir);
    let traces: Vec<String> = seen.iter().flat_map(|k| host_traces(k)).collect();
    assert_eq!(traces, Vec::<String>::new(), "cgroups or leases left");
}
