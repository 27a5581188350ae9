//! The API's deadlines for a connection waiting for a request, against the real server
//! over loopback: a keep-alive connection idle between requests, or a new one not yet
//! used, is served when its client sends past the header-read timeout (a browser keeps
//! such sockets open and sends on them when it likes: the console's Pause once failed
//! with "Failed to fetch" when the server closed one at that instant); a head begun and
//! not finished is closed at the header-read timeout, counted from its first byte; a
//! connection idle past the idle timeout is closed.

mod serve_bin;

use serve_bin::{closed_by_server, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const MASTER: &str = "keep-alive-test-master-key";

fn get(key: &str) -> Vec<u8> {
    format!("GET /v2/sandboxes HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n")
        .into_bytes()
}

/// Reads one response (its head and a `content-length` body) from `conn`; its status.
fn read_response(conn: &mut TcpStream) -> Result<u16, String> {
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().expect("content-length"));
            if seen.len() >= end + 4 + length {
                let status = head.split_whitespace().nth(1).unwrap_or("0");
                return status.parse().map_err(|_| format!("not a status: {head}"));
            }
        }
        match conn.read(&mut buf) {
            Ok(0) => return Err(format!("closed after {} bytes", seen.len())),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("{e} after {} bytes", seen.len())),
        }
    }
}

fn server(env: &[(&str, &str)]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_with_env(dir.path(), Some(MASTER), env);
    (dir, server)
}

#[test]
fn connections_waiting_past_the_header_read_timeout_without_a_head_begun_are_served() {
    // A header-read timeout of 1 s, the idle timeout at its default.
    let (_dir, server) = server(&[("SANDBOXD_HEADER_READ_TIMEOUT_SECONDS", "1")]);

    // Kept alive after a request, idle past the header-read timeout, then used again.
    let mut kept = TcpStream::connect(server.addr).expect("connect");
    kept.write_all(&get(MASTER)).expect("send");
    assert_eq!(read_response(&mut kept), Ok(200));
    // Opened and not used yet (a browser's spare socket).
    let mut unused = TcpStream::connect(server.addr).expect("connect");
    std::thread::sleep(Duration::from_millis(3000));
    for (name, conn) in [("kept-alive", &mut kept), ("unused", &mut unused)] {
        conn.write_all(&get(MASTER)).expect("send");
        assert_eq!(
            read_response(conn),
            Ok(200),
            "a {name} connection idle past the header-read timeout was not served"
        );
    }
}

#[test]
fn a_head_begun_has_the_header_read_timeout_from_its_first_byte() {
    // The idle timeout far past the header-read timeout: only the head's deadline can
    // close these within the wait below.
    let (_dir, server) = server(&[
        ("SANDBOXD_HEADER_READ_TIMEOUT_SECONDS", "1"),
        ("SANDBOXD_IDLE_TIMEOUT_SECONDS", "300"),
    ]);
    // Half a head on a new connection.
    let mut fresh = TcpStream::connect(server.addr).expect("connect");
    fresh
        .write_all(b"GET /v2/sandboxes HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    // Half a head after a request and a spell idle (longer than the header-read timeout:
    // its deadline counts from the head's first byte, not from the last response).
    let mut kept = TcpStream::connect(server.addr).expect("connect");
    kept.write_all(&get(MASTER)).expect("send");
    assert_eq!(read_response(&mut kept), Ok(200));
    std::thread::sleep(Duration::from_millis(1500));
    kept.write_all(b"GET /v2/sandboxes HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    for (name, conn) in [("new", &mut fresh), ("kept-alive", &mut kept)] {
        assert!(
            closed_by_server(conn, Duration::from_secs(60)),
            "a {name} connection holding half a head outlived the header-read timeout"
        );
    }
    assert_eq!(
        server.request("GET", "/v2/sandboxes", MASTER, None).status,
        200
    );
}

#[test]
fn connections_idle_past_the_idle_timeout_are_closed_and_a_long_request_is_not() {
    let (_dir, server) = server(&[("SANDBOXD_IDLE_TIMEOUT_SECONDS", "2")]);
    let mut kept = TcpStream::connect(server.addr).expect("connect");
    kept.write_all(&get(MASTER)).expect("send");
    assert_eq!(read_response(&mut kept), Ok(200));
    let mut unused = TcpStream::connect(server.addr).expect("connect");
    for (name, conn) in [("kept-alive", &mut kept), ("unused", &mut unused)] {
        assert!(
            closed_by_server(conn, Duration::from_secs(60)),
            "a {name} connection outlived the idle timeout"
        );
    }
    // A request in progress is not idle: an exec longer than the idle timeout answers.
    let id = server.create_sandbox(
        MASTER,
        &serde_json::json!({"name": "longer-than-idle", "vcpu": 1, "memoryMb": 256}),
    );
    let (code, out) = server.exec(MASTER, &id, &["/bin/sh", "-c", "sleep 4; echo done"]);
    assert_eq!((code, out.as_str()), (0, "done\n"));
    server.destroy(MASTER, &id);
}
