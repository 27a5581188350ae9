//! Slow clients against the real server (loopback only, bounded counts): thousands of
//! connections that send half a request header do not stop an authenticated request,
//! are closed after the header-read timeout, and past the connection cap a client gets a
//! 503 with `Retry-After` in its dialect's shape, not a hang; memory comes back.

mod serve_bin;

use serve_bin::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const MASTER: &str = "slow-clients-test-master-key";
/// Half a request: a request line and one header, never the blank line.
const HALF: &[u8] = b"GET /v2/sandboxes HTTP/1.1\r\nhost: x\r\n";

fn slow_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut c = TcpStream::connect(addr).expect("connect");
            c.write_all(HALF).expect("send half a request");
            c
        })
        .collect()
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Whether the server closed `conn` (EOF or reset) within `within`; a 408 counts.
fn closed_by_server(conn: &mut TcpStream, within: Duration) -> bool {
    conn.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 512];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a 408 answer before the close
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn thousands_of_half_requests_leave_the_api_answering() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("SANDBOXD_HEADER_READ_TIMEOUT_SECONDS", "3")];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let list = |s: &Server| s.request("GET", "/v2/sandboxes", MASTER, None).status;
    assert_eq!(list(&server), 200);
    let before = rss_kib(server.pid());

    let started = Instant::now();
    let mut slow = slow_connections(server.addr, 3000);
    assert_eq!(list(&server), 200, "answered beside 3000 half requests");
    let during = rss_kib(server.pid());
    eprintln!("server RSS: {before} KiB before, {during} KiB with 3000 slow connections");

    // The header-read timeout closes them, however long the client would wait.
    for conn in slow.iter_mut().step_by(100) {
        let left = Duration::from_secs(30).saturating_sub(started.elapsed());
        assert!(
            closed_by_server(conn, left),
            "a half request outlived the timeout"
        );
    }
    drop(slow);
    // Bounded per connection while they were open, and given back (allocator slack
    // allowed) once they are gone: the server trims its heap every few seconds.
    assert!(
        during < before + 3000 * 96,
        "{during} KiB for 3000 connections"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let after = rss_kib(server.pid());
        // Both promises, waited for: the trim runs every few seconds, so the first
        // reading may come before it (when the connections cost little, the bound alone
        // held at once and the check below raced the trim).
        if (after < before + 32 * 1024 && after < during) || Instant::now() > deadline {
            break after;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!("server RSS after they closed: {after} KiB");
    // Allocator slack of a loaded machine allowed (measured: within 1 MiB when quiet, up
    // to +24 MiB while other builds ran).
    assert!(
        after < before + 32 * 1024,
        "{after} KiB after, {before} KiB before"
    );
    assert!(
        after < during,
        "nothing given back: {after} KiB, {during} KiB open"
    );
    assert_eq!(list(&server), 200);
}

#[test]
fn past_the_connection_cap_a_client_gets_a_503_in_its_dialect() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [
        ("SANDBOXD_MAX_CONNECTIONS", "20"),
        ("SANDBOXD_HEADER_READ_TIMEOUT_SECONDS", "2"),
    ];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let slow = slow_connections(server.addr, 20);
    std::thread::sleep(Duration::from_millis(200)); // all 20 accepted

    let inngest = server.request("GET", "/v2/sandboxes", MASTER, None);
    assert_eq!(inngest.status, 503, "{}", inngest.text());
    assert_eq!(inngest.header("retry-after"), Some("1"));
    assert!(
        inngest.json()["errors"][0]["code"].is_string(),
        "{}",
        inngest.text()
    );
    let openrelay = server.request("GET", "/v1/sandboxes", MASTER, None);
    assert_eq!(openrelay.status, 503);
    assert_eq!(
        openrelay.json()["code"],
        "UNAVAILABLE",
        "{}",
        openrelay.text()
    );
    assert!(openrelay.json()["requestId"].is_string());
    let path = "/v1/customer/tenants/default/sandboxes";
    let runzivo = server.request("GET", path, MASTER, None);
    assert_eq!(runzivo.status, 503);
    assert!(
        runzivo.json()["error"]["code"].is_string(),
        "{}",
        runzivo.text()
    );
    assert_eq!(runzivo.header("retry-after"), Some("1"));

    // Once the slow ones are timed out, the cap has room again.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = server.request("GET", "/v2/sandboxes", MASTER, None).status;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(
            Instant::now() < deadline,
            "the slow connections were never closed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(slow);
}
