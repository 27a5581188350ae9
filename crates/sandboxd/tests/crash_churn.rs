//! kill -9 of the real `sandboxd serve` in the middle of concurrent create → exec →
//! delete loops, for a few rounds on one data directory. After a restart, no record is
//! left in a transitional state, and once the survivors are deleted and the server
//! stopped, nothing of any sandbox is left: no directory, mount, loop device, slot,
//! cgroup or process.

mod common;
mod host;
mod serve_bin;

use serde_json::{json, Value};
use serve_bin::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const MASTER: &str = "crash-churn-test-master-key-0123456789";
const ROUNDS: usize = 3;
const WORKERS: usize = 4;
const TRANSITIONAL: [&str; 5] = ["PENDING", "STARTING", "PAUSING", "RESUMING", "TERMINATING"];

/// One request that reports a dead server as `None` instead of panicking.
fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Option<(u16, Value)> {
    let mut conn = TcpStream::connect(addr).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(120))).ok()?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\
         content-type: application/json\r\nauthorization: Bearer {MASTER}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).ok()?;
    conn.write_all(body.as_bytes()).ok()?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let status = String::from_utf8_lossy(&raw[..split])
        .split(' ')
        .nth(1)?
        .parse()
        .ok()?;
    Some((
        status,
        serde_json::from_slice(&raw[split + 4..]).unwrap_or(Value::Null),
    ))
}

/// Create → exec → delete until `stop`, counting creates made; names come from `names`.
fn churn(addr: SocketAddr, stop: &AtomicBool, made: &AtomicUsize, names: &AtomicUsize) {
    while !stop.load(Ordering::SeqCst) {
        let name = format!("churn-{}", names.fetch_add(1, Ordering::SeqCst));
        let create = json!({"name": name, "vcpu": 1, "memoryMb": 128});
        let Some((201, created)) = try_request(addr, "POST", "/v2/sandboxes", Some(&create)) else {
            continue;
        };
        made.fetch_add(1, Ordering::SeqCst);
        let id = created["data"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let exec = json!({"command": ["/bin/true"]});
        try_request(
            addr,
            "POST",
            &format!("/v2/sandboxes/{id}/exec"),
            Some(&exec),
        );
        try_request(addr, "DELETE", &format!("/v2/sandboxes/{id}"), None);
    }
}

/// (id, status) of every stored sandbox, read beside the server (WAL).
fn records(data: &Path) -> Vec<(String, String)> {
    let script = "import sqlite3, sys\n\
        c = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True, timeout=30)\n\
        for i, s in c.execute('SELECT id, status FROM sandboxes'): print(i, s)\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(data.join("sandboxd.db"))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(i, s)| (i.to_owned(), s.to_owned()))
        .collect()
}

/// Loop devices whose backing file is under `dir`.
fn loops_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    std::fs::read_dir("/sys/block")
        .expect("/sys/block")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("loop/backing_file")).ok())
        .filter(|f| f.starts_with(&prefix))
        .collect()
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Nothing of any sandbox is left under `data` or on the host (the server stopped),
/// and every record is ended.
fn assert_nothing_left(data: &Path) {
    let sandboxes = data.join("sandboxes");
    assert_eq!(
        entries(&sandboxes),
        Vec::<String>::new(),
        "sandbox dirs left"
    );
    assert_eq!(
        common::slot_leases(data),
        Vec::<String>::new(),
        "host id slots left"
    );
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let prefix = data.display().to_string();
    let mounts: Vec<&str> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&prefix))
        .collect();
    assert_eq!(mounts, Vec::<&str>::new(), "mounts left");
    assert_eq!(loops_under(data), Vec::<String>::new(), "loop devices left");
    for (id, status) in records(data) {
        assert!(
            status == "TERMINATED" || status == "FAILED",
            "{id} is {status}"
        );
        assert_eq!(
            host::processes_of(&id),
            Vec::<i32>::new(),
            "processes of {id} left"
        );
        assert_eq!(
            host::cgroups_of(&id),
            Vec::<std::path::PathBuf>::new(),
            "cgroups of {id} left"
        );
    }
}

#[test]
fn kill_9_during_creates_leaves_nothing_behind() {
    // Kept when the test fails: what is left there may still be mounted.
    let dir = tempfile::tempdir().expect("temp dir").keep();
    let data = dir.canonicalize().expect("canonical data dir");
    let names = AtomicUsize::new(0);
    for round in 0..ROUNDS {
        let server = Server::start(&data, Some(MASTER));
        let (addr, stop, made) = (server.addr, AtomicBool::new(false), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..WORKERS {
                s.spawn(|| churn(addr, &stop, &made, &names));
            }
            // A different moment each round, with creates in flight.
            let at = 1 + round * 2;
            host::poll("sandboxes are made", Duration::from_secs(120), || {
                (made.load(Ordering::SeqCst) >= at).then_some(())
            });
            host::kill9(server.pid());
            stop.store(true, Ordering::SeqCst);
        });
        drop(server);
    }

    let server = Server::start(&data, Some(MASTER));
    let left = host::poll(
        "no record stays transitional",
        Duration::from_secs(60),
        || {
            let records = records(&data);
            records
                .iter()
                .all(|(_, s)| !TRANSITIONAL.contains(&s.as_str()))
                .then_some(records)
        },
    );
    for (id, status) in &left {
        if status == "RUNNING" || status == "PAUSED" {
            server.destroy(MASTER, id);
        }
    }
    drop(server); // SIGTERM: its warm inits go with it

    assert_nothing_left(&data);
    std::fs::remove_dir_all(&data).expect("remove the data dir");
}

/// A create of a burst, its answer (`None`: none came) and its first exec's success.
fn burst_create(addr: SocketAddr, i: usize) -> Option<(String, bool)> {
    let create = json!({"name": format!("burst-{i}"), "vcpu": 1, "memoryMb": 128});
    let (status, created) = try_request(addr, "POST", "/v2/sandboxes", Some(&create))?;
    if status != 201 {
        return None;
    }
    let id = created["data"]["id"].as_str()?.to_owned();
    let exec = json!({"command": ["/bin/true"]});
    let path = format!("/v2/sandboxes/{id}/exec");
    let ran = try_request(addr, "POST", &path, Some(&exec)).is_some_and(|(s, _)| s == 200);
    Some((id, ran))
}

#[test]
fn kill_9_during_a_burst_keeps_every_answered_create() {
    const BURST: usize = 12;
    let dir = tempfile::tempdir().expect("temp dir").keep();
    let data = dir.canonicalize().expect("canonical data dir");
    let roomy = [
        ("SANDBOXD_MAX_SANDBOXES", "64"),
        ("SANDBOXD_MAX_VCPU_TOTAL", "64"),
        ("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", "64"),
        ("SANDBOXD_WORKSPACE_QUOTA_VCPU", "64"),
        ("SANDBOXD_CREATE_RATE_BURST", "64"),
    ];
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &roomy);
    let addr = server.addr;
    let answered = AtomicUsize::new(0);
    let answers: Vec<Option<(String, bool)>> = std::thread::scope(|s| {
        let creates: Vec<_> = (0..BURST)
            .map(|i| {
                let answered = &answered;
                s.spawn(move || {
                    let made = burst_create(addr, i);
                    if made.is_some() {
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                    made
                })
            })
            .collect();
        // Killed with some creates answered and others in flight.
        host::poll("creates are answered", Duration::from_secs(120), || {
            (answered.load(Ordering::SeqCst) >= 3).then_some(())
        });
        host::kill9(server.pid());
        creates
            .into_iter()
            .map(|c| c.join().expect("a create"))
            .collect()
    });
    drop(server);
    let answered: Vec<String> = answers.into_iter().flatten().map(|(id, _)| id).collect();
    assert!(answered.len() >= 3, "{answered:?}");

    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &roomy);
    let left = host::poll(
        "no record stays transitional",
        Duration::from_secs(60),
        || {
            let records = records(&data);
            records
                .iter()
                .all(|(_, s)| !TRANSITIONAL.contains(&s.as_str()))
                .then_some(records)
        },
    );
    // Every create answered 201 survived, running, and runs commands.
    for id in &answered {
        let status = left.iter().find(|(i, _)| i == id).map(|(_, s)| s.as_str());
        assert_eq!(
            status,
            Some("RUNNING"),
            "answered create {id} after the restart"
        );
    }
    // Unanswered ones are either complete (running, and working) or ended.
    for (id, status) in &left {
        match status.as_str() {
            "RUNNING" => {
                let (code, _) = server.exec(MASTER, id, &["/bin/true"]);
                assert_eq!(code, 0, "{id} runs commands");
                server.destroy(MASTER, id);
            }
            "TERMINATED" | "FAILED" => {}
            other => panic!("{id} is {other}"),
        }
    }
    drop(server); // SIGTERM: its warm inits go with it
    assert_nothing_left(&data);
    std::fs::remove_dir_all(&data).expect("remove the data dir");
}
