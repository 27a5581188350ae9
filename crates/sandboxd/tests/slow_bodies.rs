//! Slow request bodies against the real server (loopback only): a client with a key that
//! sends its headers, then stalls or dribbles its body, gets 408 (400 in Runzivo, whose
//! spec answers every body problem so) in the dialect's shape and its connection is
//! closed; a cap's worth of such clients do not keep the API from others; an upload sent
//! steadily, for longer than the grace, is stored whole, and one that stalls leaves the old
//! file as it was.

mod serve_bin;

use serde_json::{json, Value};
use serve_bin::{parse_response, Reply, Server};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const MASTER: &str = "slow-bodies-test-master-key";
/// A body must keep 500 B/s; it starts with (and banks at most) 2 s of waiting.
const PACE: [(&str, &str); 2] = [
    ("SANDBOXD_BODY_GRACE_SECONDS", "2"),
    ("SANDBOXD_BODY_MIN_BYTES_PER_SECOND", "500"),
];

fn server(extra: &[(&str, &str)]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut env = PACE.to_vec();
    env.extend_from_slice(extra);
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    (dir, server)
}

/// Sends a request head declaring `length` body bytes, then `first` of them (`connection:
/// close`: the answer is read up to the server's close, which a kept-alive connection
/// would reach only at the idle timeout).
fn start_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    length: usize,
    first: &[u8],
) -> TcpStream {
    let mut conn = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {MASTER}\r\n\
         connection: close\r\ncontent-type: {content_type}\r\ncontent-length: {length}\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).expect("send head");
    conn.write_all(first).expect("send the first bytes");
    conn
}

/// Reads the server's answer up to its close; `None` if it neither answers nor closes
/// within `within`.
fn answer_then_close(conn: &mut TcpStream, within: Duration) -> Option<Reply> {
    conn.set_read_timeout(Some(within)).unwrap();
    let mut raw = Vec::new();
    match conn.read_to_end(&mut raw) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(_) => return None,
    }
    raw.windows(4)
        .any(|w| w == b"\r\n\r\n")
        .then(|| parse_response(&raw))
}

/// A dialect's create route and where its error code sits in an error answer.
struct Dialect {
    path: &'static str,
    status: u16,
    code: fn(&Value) -> Value,
}

const DIALECTS: [Dialect; 3] = [
    Dialect {
        path: "/v2/sandboxes",
        status: 408,
        code: |v| v["errors"][0]["code"].clone(),
    },
    Dialect {
        path: "/v1/sandboxes",
        status: 408,
        code: |v| v["code"].clone(),
    },
    Dialect {
        path: "/v1/customer/tenants/default/sandboxes",
        status: 400,
        code: |v| v["error"]["code"].clone(),
    },
];

#[test]
fn a_stalled_body_is_answered_in_each_dialect_and_its_connection_closed() {
    let (_dir, server) = server(&[]);
    for d in DIALECTS {
        let mut conn = start_request(server.addr, "POST", d.path, "application/json", 400, b"{");
        let reply = answer_then_close(&mut conn, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{}: a stalled body held its connection", d.path));
        assert_eq!(reply.status, d.status, "{}: {}", d.path, reply.text());
        let body = reply.json();
        assert!((d.code)(&body).is_string(), "{}: {body}", d.path);
        assert!(reply.text().contains("too slowly"), "{}: {body}", d.path);
    }
    // Nothing was created by any of them.
    let list = server.request("GET", "/v2/sandboxes", MASTER, None);
    assert_eq!(
        list.json()["data"].as_array().map(Vec::len),
        Some(0),
        "{}",
        list.text()
    );
}

#[test]
fn a_body_dribbled_below_the_pace_is_cut_though_bytes_keep_coming() {
    let (_dir, server) = server(&[]);
    let mut conn = start_request(
        server.addr,
        "POST",
        "/v2/sandboxes",
        "application/json",
        4000,
        b"{",
    );
    // A byte every 300 ms is 3 B/s: it earns 6 ms of waiting for 300 ms spent.
    let mut sent = 1;
    let cut = loop {
        std::thread::sleep(Duration::from_millis(300));
        if conn.write_all(b" ").is_err() {
            break true;
        }
        sent += 1;
        if sent == 200 {
            break false; // a minute of dribbling was never cut
        }
        let mut probe = [0u8; 1];
        conn.set_read_timeout(Some(Duration::from_millis(1)))
            .unwrap();
        if matches!(conn.peek(&mut probe), Ok(n) if n > 0) {
            break true; // the answer is there
        }
    };
    assert!(cut, "a body dribbled at 3 B/s was never cut");
    let reply = answer_then_close(&mut conn, Duration::from_secs(30)).expect("an answer");
    assert_eq!(reply.status, 408, "{}", reply.text());
}

#[test]
fn a_cap_of_stalled_bodies_is_freed_and_the_api_answers_again() {
    let (_dir, server) = server(&[("SANDBOXD_MAX_CONNECTIONS", "40")]);
    let mut stalled: Vec<TcpStream> = (0..40)
        .map(|_| {
            start_request(
                server.addr,
                "POST",
                "/v2/sandboxes",
                "application/json",
                999,
                b"{",
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300)); // all 40 accepted
    let full = server.request("GET", "/v2/sandboxes", MASTER, None);
    assert_eq!(full.status, 503, "the cap was not full: {}", full.text());

    // Without a pace they would hold their slots for as long as they like.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = server.request("GET", "/v2/sandboxes", MASTER, None).status;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(Instant::now() < deadline, "the stalled bodies kept the cap");
        std::thread::sleep(Duration::from_millis(200));
    }
    for conn in &mut stalled {
        let reply = answer_then_close(conn, Duration::from_secs(30)).expect("answered, closed");
        assert_eq!(reply.status, 408, "{}", reply.text());
    }
}

/// Uploads `total` bytes of `fill` in `chunk`-byte writes `pause` apart; the answer.
fn upload(
    server: &Server,
    id: &str,
    path: &str,
    total: usize,
    chunk: usize,
    pause: Duration,
    stop_after: Option<usize>,
) -> Option<Reply> {
    let route = format!("/v2/sandboxes/{id}/files?path={path}");
    let mut conn = start_request(
        server.addr,
        "PUT",
        &route,
        "application/octet-stream",
        total,
        b"",
    );
    let mut sent = 0;
    while sent < total {
        if stop_after.is_some_and(|n| sent >= n) {
            break;
        }
        let n = chunk.min(total - sent);
        if conn.write_all(&vec![b'u'; n]).is_err() {
            break;
        }
        sent += n;
        std::thread::sleep(pause);
    }
    answer_then_close(&mut conn, Duration::from_secs(60))
}

#[test]
fn a_steady_upload_longer_than_the_grace_is_stored_and_a_stalled_one_changes_nothing() {
    let (_dir, server) = server(&[("SANDBOXD_NETWORK", "none")]);
    let id = server.create_sandbox(
        MASTER,
        &json!({ "name": "uploads", "vcpu": 1, "memoryMb": 128 }),
    );

    // 5 KiB every 100 ms is ~50 KiB/s, a hundred times the pace, for ~4 s: twice the grace.
    let steady = |stop_after| {
        let pause = Duration::from_millis(100);
        upload(
            &server,
            &id,
            "/steady",
            200 * 1024,
            5 * 1024,
            pause,
            stop_after,
        )
    };
    let reply = steady(None).expect("an answer to the steady upload");
    assert_eq!(reply.status, 200, "{}", reply.text());
    let (code, size) = server.exec(MASTER, &id, &["/bin/sh", "-c", "wc -c < /steady"]);
    assert_eq!((code, size.trim()), (0, "204800"));

    // The same upload stops after 10 KiB: 408, and /steady is still the first upload.
    let reply = steady(Some(10 * 1024)).expect("a stalled upload is answered");
    assert_eq!(reply.status, 408, "{}", reply.text());
    assert!(reply.text().contains("too slowly"), "{}", reply.text());
    let (code, size) = server.exec(MASTER, &id, &["/bin/sh", "-c", "wc -c < /steady"]);
    assert_eq!(
        (code, size.trim()),
        (0, "204800"),
        "the stalled upload changed the file"
    );
    server.destroy(MASTER, &id);
}
