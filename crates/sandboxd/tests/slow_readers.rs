//! A fast writer and a slow reader on the Inngest output and log streams, over a real
//! socket to the real server: every byte the command wrote arrives in order exactly once,
//! or the stream ends with the dialect's terminal `error` frame after an exact prefix of
//! it (never a silent hole), and the server's memory stays bounded while the reader lags.

mod serve_bin;

use base64::Engine as _;
use serde_json::{json, Value};
use serve_bin::Server;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const MASTER: &str = "slow-readers-test-master-key";
/// What the command writes: 24 MiB of random bytes, base64 (about 32 MiB of text).
const WRITER: &str = "sleep 1; head -c 25165824 /dev/urandom | base64 | tee /tmp/written";
/// Growth of the server's RSS allowed while a reader lags (a memory bound, not a time).
const RSS_BOUND_KIB: u64 = 300 * 1024;

/// Sends a GET and reads the whole answer slowly: a pause first (the writer runs ahead),
/// then small reads with pauses, sampling the server's RSS. Returns (raw, peak RSS).
fn slow_get(server: &Server, path: &str) -> (Vec<u8>, u64) {
    let mut conn = TcpStream::connect(server.addr).expect("connect");
    let head = format!(
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer {MASTER}\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).expect("send");
    let mut peak = server.rss_kib();
    std::thread::sleep(Duration::from_secs(4));
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut reads = 0u64;
    loop {
        let n = conn.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        reads += 1;
        if reads.is_multiple_of(64) {
            peak = peak.max(server.rss_kib());
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    (raw, peak)
}

/// The body of a chunked HTTP answer (status 200 asserted).
fn body_of(raw: &[u8]) -> Vec<u8> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of head");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let mut rest = &raw[split + 4..];
    let mut body = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16)
            .expect("chunk size");
        rest = &rest[eol + 2..];
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// The decoded data of the `log` frames, and the terminal `error` frame if any.
fn decode(body: &[u8]) -> (Vec<u8>, Option<Value>) {
    let text = std::str::from_utf8(body).expect("NDJSON is text");
    assert!(text.is_empty() || text.ends_with('\n'), "a cut frame");
    let mut data = Vec::new();
    let mut error = None;
    for line in text.lines() {
        let frame: Value = serde_json::from_str(line).expect("frame");
        assert!(error.is_none(), "a frame after the terminal error: {line}");
        match frame["type"].as_str() {
            Some("log") => data.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(frame["data"].as_str().expect("data"))
                    .expect("base64"),
            ),
            Some("error") => error = Some(frame),
            _ => panic!("unknown frame {line}"),
        }
    }
    (data, error)
}

fn sha(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sha256 of the first `len` bytes the command wrote, computed inside the sandbox.
fn written_sha(server: &Server, id: &str, len: usize) -> String {
    let script = format!("head -c {len} /tmp/written | sha256sum");
    let (code, out) = server.exec(MASTER, id, &["/bin/sh", "-c", &script]);
    assert_eq!(code, 0, "{out}");
    out.split_whitespace().next().expect("sum").to_owned()
}

fn written_len(server: &Server, id: &str) -> usize {
    let (code, out) = server.exec(MASTER, id, &["/bin/sh", "-c", "wc -c < /tmp/written"]);
    assert_eq!(code, 0, "{out}");
    out.trim().parse().expect("length")
}

/// Every byte, or an exact prefix then the documented terminal error.
fn assert_whole_or_marked(server: &Server, id: &str, body: &[u8], loss_code: &str) {
    let (data, error) = decode(body);
    let total = written_len(server, id);
    match error {
        None => {
            assert_eq!(data.len(), total, "bytes lost with no error frame");
            assert_eq!(sha(&data), written_sha(server, id, total), "bytes differ");
        }
        Some(frame) => {
            eprintln!(
                "stream ended after {} of {total} bytes: {frame}",
                data.len()
            );
            assert_eq!(frame["errors"][0]["code"], loss_code, "{frame}");
            assert!(data.len() <= total);
            assert_eq!(
                sha(&data),
                written_sha(server, id, data.len()),
                "what arrived before the error is not the start of the output"
            );
        }
    }
}

fn start() -> (tempfile::TempDir, Server, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), Some(MASTER));
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "slow-reader", "vcpu": 1, "memoryMb": 512}),
    );
    (dir, server, id)
}

/// Starts [`WRITER`] as a background process; returns its id.
fn start_writer(server: &Server, id: &str) -> String {
    let started = server.request(
        "POST",
        &format!("/v2/sandboxes/{id}/processes"),
        MASTER,
        Some(&json!({"command": ["/bin/sh", "-c", WRITER]})),
    );
    assert_eq!(started.status, 201, "{}", started.text());
    started.json()["data"]["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

#[test]
fn a_slow_reader_of_a_process_output_stream_gets_every_byte_or_the_loss_error() {
    let (_dir, server, id) = start();
    let before = server.rss_kib();
    let pid = start_writer(&server, &id);
    let path = format!("/v2/sandboxes/{id}/processes/{pid}/output/stream");
    let (raw, peak) = slow_get(&server, &path);
    eprintln!("server RSS {before} KiB before, peak {peak} KiB while the reader lagged");
    assert!(
        peak < before + RSS_BOUND_KIB,
        "{peak} KiB, {before} KiB before"
    );
    assert_whole_or_marked(
        &server,
        &id,
        &body_of(&raw),
        "sandbox_process_output_not_retained",
    );
    server.destroy(MASTER, &id);
}

#[test]
fn a_slow_reader_of_the_followed_log_gets_every_byte_or_the_loss_error() {
    let (_dir, server, id) = start();
    let before = server.rss_kib();
    let pid = start_writer(&server, &id);
    // The log follows until the sandbox ends: end it once the writer is done.
    let ender = {
        let addr = server.addr;
        let id = id.clone();
        std::thread::spawn(move || {
            let wait = format!("/v2/sandboxes/{id}/processes/{pid}/wait");
            let auth = [("authorization", format!("Bearer {MASTER}"))];
            let _ = serve_bin::try_http(addr, "POST", &wait, &auth, "{}");
        })
    };
    let path = format!("/v2/sandboxes/{id}/logs?follow=true");
    let mut conn_raw = None;
    std::thread::scope(|s| {
        let reader = s.spawn(|| slow_get(&server, &path));
        ender.join().expect("waiter");
        // Hash what was written before the sandbox (and the stream) ends.
        let total = written_len(&server, &id);
        let whole = written_sha(&server, &id, total);
        let path = format!("/v2/sandboxes/{id}");
        let reply = server.request("DELETE", &path, MASTER, None);
        assert!(matches!(reply.status, 202 | 204), "{}", reply.text());
        conn_raw = Some((reader.join().expect("reader"), total, whole));
    });
    let ((raw, peak), total, whole) = conn_raw.expect("read");
    eprintln!("server RSS {before} KiB before, peak {peak} KiB while the reader lagged");
    assert!(
        peak < before + RSS_BOUND_KIB,
        "{peak} KiB, {before} KiB before"
    );
    let (data, error) = decode(&body_of(&raw));
    let error = error.expect("a followed log ends with a terminal frame");
    let code = error["errors"][0]["code"]
        .as_str()
        .expect("code")
        .to_owned();
    if code == "sandbox_not_running" {
        // Nothing was lost: the log is the writer's output (plus the execs' output
        // that came after it, which the log also carries).
        assert!(
            data.len() >= total,
            "bytes lost with no loss frame: {error}"
        );
        assert_eq!(sha(&data[..total]), whole, "bytes differ");
    } else {
        eprintln!("log ended after {} of {total} bytes: {error}", data.len());
        assert_eq!(code, "sandbox_process_output_not_retained", "{error}");
        // The sandbox is gone, so the prefix is checked on the output stream (above).
    }
}
