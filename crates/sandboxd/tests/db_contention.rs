//! Database contention: while a second process (Python's sqlite3) holds the database's
//! write lock (`BEGIN EXCLUSIVE`), reads keep being answered even while a create waits
//! for the lock, and a write that cannot get it within its bound is refused with 503
//! and `Retry-After` in the dialect's shape, never 500. Once the lock is let go,
//! creates work again and no record is left half made.

mod openrelay;
mod serve_bin;

use openrelay::{Or, MASTER};
use serde_json::{json, Value};
use serve_bin::{http, Reply};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

/// Holds `BEGIN EXCLUSIVE` on the database from another process until told to stop.
struct Locker(Child);

impl Locker {
    fn hold(db: &Path) -> Locker {
        let script = "import sqlite3, sys\n\
            c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n\
            c.execute('BEGIN EXCLUSIVE')\n\
            print('locked', flush=True)\n\
            sys.stdin.readline()\n\
            c.execute('ROLLBACK')\n";
        let mut child = Command::new("python3")
            .args(["-c", script])
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn python3");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("stdout"))
            .read_line(&mut line)
            .expect("read from the locker");
        assert_eq!(line.trim(), "locked", "the locker could not lock");
        Locker(child)
    }
}

impl Drop for Locker {
    /// Lets go of the lock and waits for the locker to exit.
    fn drop(&mut self) {
        if let Some(stdin) = self.0.stdin.as_mut() {
            let _ = stdin.write_all(b"go\n");
        }
        let _ = self.0.wait();
    }
}

fn inngest(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Reply {
    let mut headers = vec![("authorization", format!("Bearer {MASTER}"))];
    if body.is_some() {
        headers.push(("content-type", "application/json".into()));
    }
    let body = body.map(Value::to_string).unwrap_or_default();
    http(addr, method, path, &headers, &body)
}

#[test]
fn a_locked_database_delays_no_read_and_refuses_writes_with_503() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical data dir");
    let or = Or::start(&data, &[]);
    let addr = or.server.addr;
    let existing = or.server.create_sandbox(
        MASTER,
        &json!({"name": "before", "vcpu": 1, "memoryMb": 256}),
    );
    let get = format!("/v2/sandboxes/{existing}");

    let locker = Locker::hold(&data.join("sandboxd.db"));
    let create_done = AtomicBool::new(false);
    let (created, reads_meanwhile) = std::thread::scope(|s| {
        let create = s.spawn(|| {
            let r = inngest(
                addr,
                "POST",
                "/v2/sandboxes",
                Some(&json!({"name": "during", "vcpu": 1, "memoryMb": 256})),
            );
            create_done.store(true, Ordering::SeqCst);
            r
        });
        // Reads while the create waits for the lock: none may wait behind it.
        let mut reads = 0;
        while !create_done.load(Ordering::SeqCst) {
            let listed = inngest(addr, "GET", "/v2/sandboxes?limit=10", None);
            assert_eq!(listed.status, 200, "{}", listed.text());
            let got = inngest(addr, "GET", &get, None);
            assert_eq!(got.status, 200, "{}", got.text());
            assert_eq!(got.json()["data"]["status"], "RUNNING");
            if !create_done.load(Ordering::SeqCst) {
                reads += 1;
            }
        }
        (create.join().expect("create thread"), reads)
    });
    assert!(
        reads_meanwhile >= 10,
        "only {reads_meanwhile} reads were answered while a create waited for the lock"
    );
    assert_eq!(created.status, 503, "{}", created.text());
    assert!(created.header("retry-after").is_some(), "no Retry-After");
    assert_eq!(created.json()["errors"][0]["code"], "compute_unavailable");

    let refused = or.post("/v1/sandboxes", &json!({"template": "default"}));
    assert_eq!(openrelay::code(&refused, 503), "UNAVAILABLE");
    assert!(refused.header("retry-after").is_some(), "no Retry-After");
    drop(locker);

    let after = or.server.create_sandbox(
        MASTER,
        &json!({"name": "after", "vcpu": 1, "memoryMb": 256}),
    );
    or.server.destroy(MASTER, &after);
    or.server.destroy(MASTER, &existing);
    let listed = inngest(addr, "GET", "/v2/sandboxes?limit=100", None).json();
    let left: Vec<&Value> = listed["data"]
        .as_array()
        .expect("list")
        .iter()
        .filter(|s| s["status"] != "TERMINATED")
        .collect();
    assert!(left.is_empty(), "records left active: {left:?}");
}
