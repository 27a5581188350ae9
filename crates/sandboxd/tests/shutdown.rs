//! Bounded shutdown of the real `sandboxd serve`: SIGTERM ends open log followers with
//! the dialect's terminal frame, waits for other requests at most the configured grace
//! period, and a second signal stops it at once. Sandboxes keep running either way.

mod host;
mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

const MASTER: &str = "shutdown-test-master-key-0123456789";

/// How long a stopping server may take in these tests, well past their grace periods
/// (when it is short) and well short of the long one.
const STOP: Duration = Duration::from_secs(60);

/// A request whose head has been sent on a connection of its own.
fn open(server: &Server, head: &str) -> TcpStream {
    let mut conn = TcpStream::connect(server.addr).expect("connect");
    conn.set_read_timeout(Some(STOP)).expect("read timeout");
    let head = format!(
        "{head}\r\nhost: x\r\nauthorization: Bearer {MASTER}\r\n{}\r\n",
        if head.starts_with("PUT") {
            "content-type: application/octet-stream\r\ncontent-length: 1000000\r\nexpect: 100-continue\r\n"
        } else {
            ""
        }
    );
    conn.write_all(head.as_bytes()).expect("send head");
    conn
}

/// Reads until `marker` has come, returning everything read.
fn read_until(conn: &mut TcpStream, marker: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(marker) {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!(
                "reading for {marker:?}: {e}; got {}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A log follower, its response head read.
fn follow_logs(server: &Server, id: &str) -> TcpStream {
    let mut conn = open(
        server,
        &format!("GET /v2/sandboxes/{id}/logs?follow=true HTTP/1.1"),
    );
    let head = read_until(&mut conn, "\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    conn
}

/// An upload whose body never comes, its handler already reading it.
fn stuck_upload(server: &Server, id: &str) -> TcpStream {
    let mut conn = open(
        server,
        &format!("PUT /v2/sandboxes/{id}/files?path=/tmp/big HTTP/1.1"),
    );
    let interim = read_until(&mut conn, "\r\n\r\n");
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
    conn.write_all(b"only the start").expect("send a little");
    conn
}

/// The rest of the follower's body holds the Inngest terminal frame, then it ends.
fn assert_ended_with_terminal_frame(mut follower: TcpStream) {
    let mut rest = Vec::new();
    follower.read_to_end(&mut rest).expect("the follower ends");
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.contains(r#""type":"error""#) && rest.contains("compute_unavailable"),
        "no terminal frame: {rest}"
    );
}

fn signal(server: &Server) {
    // SAFETY: kill(2) on the PID of our own, not yet reaped, child.
    let rc = unsafe { libc::kill(server.pid(), libc::SIGTERM) };
    assert_eq!(rc, 0, "SIGTERM: {}", std::io::Error::last_os_error());
}

/// Whether the server process has exited (it stays a zombie of ours until reaped).
fn exited(server: &Server) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", server.pid())).unwrap_or_default();
    stat.rsplit_once(')')
        .is_none_or(|(_, rest)| rest.trim_start().starts_with('Z'))
}

fn start(data: &Path, grace: &str) -> (Server, String) {
    let server = Server::start_with_env(
        data,
        Some(MASTER),
        &[("SANDBOXD_SHUTDOWN_GRACE_SECONDS", grace)],
    );
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "stays", "vcpu": 1, "memoryMb": 256}),
    );
    (server, id)
}

/// Runs `body` on a server with grace period `grace` and a sandbox; afterwards (even
/// when `body` panicked, after killing the server if it still runs) checks that the
/// sandbox outlived its server, then destroys it through a new server and checks that
/// nothing is left.
fn with_sandbox(grace: &str, body: impl FnOnce(&Server, &str)) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical data dir");
    let (server, id) = start(&data, grace);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&server, &id)));
    if outcome.is_err() && !exited(&server) {
        host::kill9(server.pid());
    }
    drop(server);
    let survived = host::agent_of(&id).is_some();
    let next = Server::start(&data, Some(MASTER));
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (code, out) = next.exec(MASTER, &id, &["/bin/echo", "still here"]);
        assert_eq!((code, out.as_str()), (0, "still here\n"));
    }));
    next.destroy(MASTER, &id);
    drop(next);
    if let Err(panic) = outcome.and(checked) {
        std::panic::resume_unwind(panic);
    }
    assert!(survived, "the sandbox did not outlive the server");
    host::assert_gone(&data, &id);
}

#[test]
fn sigterm_ends_followers_and_exits_within_the_grace_period() {
    with_sandbox("2", |server, id| {
        let follower = follow_logs(server, id);
        let _upload = stuck_upload(server, id);

        signal(server);
        assert_ended_with_terminal_frame(follower);
        host::poll("the server exits despite the stuck upload", STOP, || {
            exited(server).then_some(())
        });
    });
}

#[test]
fn a_second_signal_stops_at_once() {
    with_sandbox("3600", |server, id| {
        let follower = follow_logs(server, id);
        let _upload = stuck_upload(server, id);

        signal(server);
        // The follower's terminal frame shows that the shutdown has begun.
        assert_ended_with_terminal_frame(follower);
        assert!(!exited(server), "the upload's grace period was not given");
        std::thread::sleep(Duration::from_millis(200)); // let it listen for the next signal
        signal(server);
        host::poll("the server stops at the second signal", STOP, || {
            exited(server).then_some(())
        });
    });
}
