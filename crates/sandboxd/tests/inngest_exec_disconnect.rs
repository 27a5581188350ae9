//! A client that leaves in the middle of an Inngest captured exec takes its command with
//! it, through a real `sandboxd serve`: the server ends the agent call with the request,
//! the agent kills the command's process group, and the exec's room in the server's
//! output budget is freed (with room for one exec in the whole server, the next exec
//! runs instead of waiting and getting 503). Only a revoke of the request's key leaves
//! the command running (`revoked_key_streams.rs`).

mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

const MASTER: &str = "inngest-exec-disconnect-test-master-key-0123";

/// Polls `done` every 100 ms until it holds; fails the test after a minute.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether `path` exists in sandbox `id`, asked through the files API (which takes no
/// room in the exec output budget).
fn exists(server: &Server, id: &str, path: &str) -> bool {
    let reply = server.request(
        "GET",
        &format!("/v2/sandboxes/{id}/files?path={path}"),
        MASTER,
        None,
    );
    reply.status == 200
}

#[test]
fn a_client_that_leaves_mid_exec_takes_its_command_and_its_budget_room_with_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Room for one Inngest exec's captured output (4 MiB) in the whole server.
    let server = Server::start_with_env(
        dir.path(),
        Some(MASTER),
        &[("SANDBOXD_EXEC_OUTPUT_BUDGET_MIB", "4")],
    );
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "leaver", "vcpu": 1, "memoryMb": 256}),
    );
    let command = "echo $$ > /tmp/leaver.pid; touch /tmp/leaver.started; \
                   while [ ! -e /tmp/go ]; do sleep 0.1; done; touch /tmp/leaver.ran-on";
    let body = json!({"command": ["/bin/sh", "-c", command], "timeout": "5m"}).to_string();
    let mut conn = TcpStream::connect(server.addr).expect("connect");
    write!(
        conn,
        "POST /v2/sandboxes/{id}/exec HTTP/1.1\r\nhost: {}\r\n\
         authorization: Bearer {MASTER}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        server.addr,
        body.len()
    )
    .expect("send the exec");
    wait_until("the command started", || {
        exists(&server, &id, "/tmp/leaver.started")
    });

    // The client leaves without reading an answer.
    conn.shutdown(Shutdown::Both).expect("shutdown");
    drop(conn);

    // Its room is freed: the next exec gets it (at worst after the server noticed the
    // close), where a room kept by the killed call would leave it a 503 after its wait.
    let (code, _) = server.exec(MASTER, &id, &["/bin/true"]);
    assert_eq!(code, 0);
    // The command and its shell loop are gone.
    wait_until("the left command is killed", || {
        let (alive, _) = server.exec(
            MASTER,
            &id,
            &["/bin/sh", "-c", "kill -0 \"$(cat /tmp/leaver.pid)\""],
        );
        alive != 0
    });
    let (code, _) = server.exec(MASTER, &id, &["/bin/touch", "/tmp/go"]);
    assert_eq!(code, 0);
    // A command still running would see the go within 0.1 s.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !exists(&server, &id, "/tmp/leaver.ran-on"),
        "the command ran on after its client left"
    );
    server.destroy(MASTER, &id);
}
