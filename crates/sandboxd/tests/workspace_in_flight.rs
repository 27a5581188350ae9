//! One workspace cannot hold the server (REVIEW11 #3, #4), through a real `sandboxd
//! serve` with small caps: past its cap of long-lived requests in flight (followed
//! logs, execs) a workspace gets the dialect's 429 while another workspace is still
//! served; dropped streams give their places back (no leak over rounds); and many
//! concurrent big-output execs keep the server's peak RSS within its output budget,
//! each answered in full or refused with a retryable 503 (or the workspace's 429 past
//! its share of the budget).

mod serve_bin;

use serde_json::{json, Value};
use serve_bin::{cli, Reply, Server};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const MASTER: &str = "signkey-test-00112233445566778899aabbccddeeff";
const CAP: usize = 3;

/// Destroys the sandboxes it holds (each with its own key) when dropped.
struct Sandboxes<'a> {
    server: &'a Server,
    held: Vec<(String, String)>,
}

impl<'a> Sandboxes<'a> {
    fn new(server: &'a Server) -> Self {
        Sandboxes {
            server,
            held: Vec::new(),
        }
    }

    fn create(&mut self, key: &str, name: &str, memory_mb: u32) -> String {
        let body = json!({"name": name, "vcpu": 1, "memoryMb": memory_mb});
        let id = self.server.create_sandbox(key, &body);
        self.held.push((key.to_owned(), id.clone()));
        id
    }
}

impl Drop for Sandboxes<'_> {
    fn drop(&mut self) {
        for (key, id) in &self.held {
            let path = format!("/v2/sandboxes/{id}");
            let _ = self.server.try_request("DELETE", &path, key, None);
        }
        for (key, id) in &self.held {
            let path = format!("/v2/sandboxes/{id}");
            for _ in 0..600 {
                match self.server.try_request("GET", &path, key, None) {
                    Ok(r)
                        if matches!(
                            r.json()["data"]["status"].as_str(),
                            Some("TERMINATING" | "RUNNING")
                        ) =>
                    {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => break,
                }
            }
        }
    }
}

/// Opens `GET path` and reads its answer's head; the connection stays open (the
/// stream held) until the returned stream is dropped.
fn open(addr: SocketAddr, path: &str, key: &str) -> (u16, TcpStream) {
    let mut conn = TcpStream::connect(addr).expect("connect");
    let head =
        format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {key}\r\n\r\n");
    conn.write_all(head.as_bytes()).expect("send");
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert_eq!(
            conn.read(&mut byte).expect("read head"),
            1,
            "closed before its head"
        );
        raw.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    (status, conn)
}

fn post(server: &Server, key: &str, path: &str, body: &Value) -> Reply {
    server.request("POST", path, key, Some(body))
}

fn retry_after(r: &Reply) -> u64 {
    r.header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds")
}

/// A key of a second workspace, made before the server starts.
fn team_key(data: &str) -> String {
    let made = cli(
        &["keys", "create", "--workspace", "team", "--data-dir", data],
        "",
    );
    String::from_utf8(made.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

/// A server whose workspaces may each have [`CAP`] requests in flight, and a key of a
/// second workspace.
fn capped_server(dir: &tempfile::TempDir) -> (Server, String) {
    let team = team_key(dir.path().to_str().expect("utf-8"));
    let cap = CAP.to_string();
    let server = Server::start_with_env(
        dir.path(),
        Some(MASTER),
        &[("SANDBOXD_MAX_IN_FLIGHT_PER_WORKSPACE", cap.as_str())],
    );
    (server, team)
}

/// The first answer of `send` that is not 429 (the workspace's places coming back).
fn once_served(mut send: impl FnMut() -> Reply) -> Reply {
    loop {
        let r = send();
        if r.status != 429 {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_workspace_past_its_long_lived_cap_gets_429_and_others_are_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (server, team) = capped_server(&dir);
    let mut boxes = Sandboxes {
        server: &server,
        held: Vec::new(),
    };
    let id = boxes.create(MASTER, "held", 256);
    let theirs = boxes.create(&team, "theirs", 256);
    let logs = format!("/v2/sandboxes/{id}/logs?follow=true");
    let exec_path = format!("/v2/sandboxes/{id}/exec");
    let echo = json!({"command": ["/bin/sh", "-c", "echo ok"]});

    // Rounds of opening the cap's worth of followed logs and dropping them (the
    // client going away): the places come back every time.
    for round in 0..4 {
        let mut held = Vec::new();
        for _ in 0..CAP {
            let (status, conn) = open_when_free(server.addr, &logs, MASTER);
            assert_eq!(status, 200, "round {round}");
            held.push(conn);
        }
        // One more long-lived request of this workspace: 429 in each dialect.
        let (status, _) = open(server.addr, &logs, MASTER);
        assert_eq!(status, 429, "round {round}: a followed log past the cap");
        let r = post(&server, MASTER, &exec_path, &echo);
        assert_eq!(r.status, 429, "{}", r.text());
        assert_eq!(
            r.json()["errors"][0]["code"],
            "rate_limited",
            "{}",
            r.text()
        );
        assert!(retry_after(&r) >= 1);
        let r = post(
            &server,
            MASTER,
            &format!("/v1/sandboxes/{id}/exec"),
            &json!({"argv": ["/bin/true"]}),
        );
        assert_eq!(r.status, 429, "OpenRelay exec: {}", r.text());
        assert_eq!(r.json()["code"], "RATE_LIMITED", "{}", r.text());
        assert!(retry_after(&r) >= 1);
        // Another workspace is served meanwhile: its exec and a create.
        let r = post(
            &server,
            &team,
            &format!("/v2/sandboxes/{theirs}/exec"),
            &echo,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        if round == 0 {
            boxes.create(&team, "another", 128);
        }
        drop(held);
    }
    // And the workspace's own short requests and execs work again.
    let r = once_served(|| post(&server, MASTER, &exec_path, &echo));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A process list is buffered like an exec's answer: at the workspace's cap of requests
/// in flight it is that dialect's 429 with `Retry-After` (another workspace's is
/// served), and once the held requests end it is answered again.
#[test]
fn a_process_list_counts_among_the_workspaces_requests_in_flight() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (server, team) = capped_server(&dir);
    let mut boxes = Sandboxes::new(&server);
    let id = boxes.create(MASTER, "lists", 128);
    let list = format!("/v2/sandboxes/{id}/processes");
    let their_list = format!(
        "/v2/sandboxes/{}/processes",
        boxes.create(&team, "their-lists", 128)
    );
    let logs = format!("/v2/sandboxes/{id}/logs?follow=true");
    let r = server.request("GET", &list, MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());

    let held: Vec<_> = (0..CAP)
        .map(|_| {
            let (status, conn) = open_when_free(server.addr, &logs, MASTER);
            assert_eq!(status, 200);
            conn
        })
        .collect();
    let r = server.request("GET", &list, MASTER, None);
    assert_eq!(r.status, 429, "a process list past the cap: {}", r.text());
    let code = r.json()["errors"][0]["code"].clone();
    assert_eq!(
        (code.as_str(), retry_after(&r) >= 1),
        (Some("rate_limited"), true)
    );
    let r = server.request("GET", &their_list, &team, None);
    assert_eq!(r.status, 200, "another workspace: {}", r.text());
    drop(held);
    let r = once_served(|| server.request("GET", &list, MASTER, None));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Opens a followed stream, waiting while the workspace's earlier (dropped) streams
/// are still being noticed as gone by the server.
fn open_when_free(addr: SocketAddr, path: &str, key: &str) -> (u16, TcpStream) {
    for _ in 0..300 {
        let (status, conn) = open(addr, path, key);
        if status != 429 {
            return (status, conn);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the workspace's places never came back: a dropped stream leaked its place");
}

/// The server's peak resident memory (VmHWM) in KiB.
fn peak_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

#[test]
fn concurrent_big_output_execs_stay_within_the_output_budget() {
    const BUDGET_MIB: u64 = 32;
    const PER_SANDBOX: usize = 10;
    const OUT: usize = 2_000_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_with_env(
        dir.path(),
        Some(MASTER),
        &[
            ("SANDBOXD_EXEC_OUTPUT_BUDGET_MIB", "32"),
            ("SANDBOXD_MAX_IN_FLIGHT_PER_WORKSPACE", "0"),
        ],
    );
    let mut boxes = Sandboxes {
        server: &server,
        held: Vec::new(),
    };
    let ids: Vec<String> = (0..4)
        .map(|n| boxes.create(MASTER, &format!("big{n}"), 512))
        .collect();
    let script = format!("head -c {OUT} /dev/zero; head -c {OUT} /dev/zero >&2");
    let body = json!({"command": ["/bin/sh", "-c", script]}).to_string();
    // Warm up once, then take the peak so far as the baseline.
    let (code, out) = server.exec(MASTER, &ids[0], &["/bin/sh", "-c", &script]);
    assert_eq!((code, out.len()), (0, OUT));
    let before = peak_kib(server.pid());

    let addr = server.addr;
    let answers: Vec<Reply> = std::thread::scope(|s| {
        let threads: Vec<_> = ids
            .iter()
            .flat_map(|id| std::iter::repeat_n(id, PER_SANDBOX))
            .map(|id| {
                let body = body.clone();
                s.spawn(move || slow_reader_exec(addr, id, &body))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .collect()
    });
    let after = peak_kib(server.pid());
    let mut full = 0;
    for r in &answers {
        match r.status {
            200 => {
                let data = &r.json()["data"];
                let len = |f: &str| {
                    base64::Engine::decode(
                        &base64::engine::general_purpose::STANDARD,
                        data[f].as_str().expect("output"),
                    )
                    .expect("base64")
                    .len()
                };
                assert_eq!((len("stdout"), len("stderr")), (OUT, OUT), "a whole answer");
                full += 1;
            }
            503 => {
                assert_eq!(
                    r.json()["errors"][0]["code"],
                    "compute_unavailable",
                    "{}",
                    r.text()
                );
                assert!(retry_after(r) >= 1);
            }
            // One workspace past its share of the budget (a quarter): its own 429.
            429 => {
                assert_eq!(
                    r.json()["errors"][0]["code"],
                    "rate_limited",
                    "{}",
                    r.text()
                );
                assert!(retry_after(r) >= 1);
            }
            other => panic!("exec answered {other}: {}", r.text()),
        }
    }
    assert!(full >= 1, "no exec got through at all");
    // The budget (32 MiB) plus generous slack for everything else the burst holds
    // (connections, tasks, allocator slack); without a budget 40 answers of ~6 MiB
    // each are held at once (123 MiB of growth measured).
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!(
        "peak RSS {before} -> {after} KiB; {full} of {} answered whole",
        answers.len()
    );
    assert!(
        grown_mib <= BUDGET_MIB + 64,
        "peak RSS grew {grown_mib} MiB over a {BUDGET_MIB} MiB output budget ({full} full answers)"
    );
}

/// An exec whose client waits before reading its answer (the answer is held by the
/// server meanwhile), then reads it whole.
fn slow_reader_exec(addr: SocketAddr, id: &str, body: &str) -> Reply {
    let mut conn = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST /v2/sandboxes/{id}/exec HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         authorization: Bearer {MASTER}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).expect("send");
    conn.write_all(body.as_bytes()).expect("send");
    std::thread::sleep(Duration::from_secs(3));
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).expect("read");
    serve_bin::parse_response(&raw)
}
