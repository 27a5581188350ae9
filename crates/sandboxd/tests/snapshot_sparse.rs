//! A snapshot costs what a sandbox's files store, not their length: a sandbox with a
//! 1 TiB sparse file (a few bytes of data) snapshots in bounded time (before a 120 s
//! client timeout, where reading the whole length would take hours), its `storedBytes`
//! is small, and a sandbox made from it finds the file still sparse and reading zeros.

mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::io::{Read, Write};

const KEY: &str = "sparse-snapshot-master";

/// POST of `body` to `path` that gives up after 120 s (a client's timeout).
fn post_within_120s(s: &Server, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let body = body.to_string();
    let mut conn = std::net::TcpStream::connect(s.addr).expect("connect");
    conn.set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .expect("timeout");
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer {KEY}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(head.as_bytes()).expect("send");
    let mut raw = Vec::new();
    if let Err(e) = conn.read_to_end(&mut raw) {
        panic!("no answer to POST {path} within the client's 120 s: {e}");
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(serde_json::Value::Null);
    (status, json)
}

/// Deletes the sandboxes it names when dropped (a failed assertion included); never
/// panics.
struct Cleanup<'a>(&'a Server, Vec<String>);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for id in &self.1 {
            let _ = self
                .0
                .try_request("DELETE", &format!("/v2/sandboxes/{id}"), KEY, None);
        }
        for id in &self.1 {
            for _ in 0..500 {
                let got = self
                    .0
                    .try_request("GET", &format!("/v2/sandboxes/{id}"), KEY, None);
                match got {
                    Ok(r) if r.json()["data"]["status"] != "TERMINATED" => {
                        std::thread::sleep(std::time::Duration::from_millis(20))
                    }
                    _ => break,
                }
            }
        }
    }
}

fn sh(s: &Server, id: &str, script: &str) -> String {
    let (code, out) = s.exec(KEY, id, &["/bin/sh", "-c", script]);
    assert_eq!(code, 0, "{script}: {out}");
    out
}

#[test]
fn a_huge_sparse_file_snapshots_in_bounded_time_and_restores_sparse() {
    let data = tempfile::tempdir().expect("temp dir");
    let s = Server::start_with_env(
        data.path(),
        Some(KEY),
        &[
            ("SANDBOXD_DISK_MB_PER_SANDBOX", "1024"),
            ("SANDBOXD_NETWORK", "none"),
            ("SANDBOXD_WARM_INITS", "0"),
        ],
    );
    let body = json!({"name": "sparse-src", "vcpu": 1, "memoryMb": 128});
    let src = s.create_sandbox(KEY, &body);
    let mut cleanup = Cleanup(&s, vec![src.clone()]);
    // 1 TiB long, 8 bytes of data half-way.
    sh(
        &s,
        &src,
        "truncate -s 1T /big && printf datadata | dd of=/big bs=1 seek=549755813888 conv=notrunc 2>/dev/null && sync",
    );
    let (status, snap) = post_within_120s(
        &s,
        &format!("/v2/sandboxes/{src}/snapshots"),
        &json!({"name": "sparse"}),
    );
    assert_eq!(status, 201, "{snap}");
    let stored = snap["data"]["storedBytes"].as_u64().expect("storedBytes");
    assert!(
        stored < 1 << 20,
        "storedBytes counts data, not length: {stored}"
    );
    let snapshot = snap["data"]["id"].as_str().expect("id").to_owned();

    let copy = s.create_sandbox(
        KEY,
        &json!({"name": "sparse-copy", "vcpu": 1, "memoryMb": 128, "snapshotId": snapshot}),
    );
    cleanup.1.push(copy.clone());
    let out = sh(&s, &copy, "stat -c '%s %b' /big");
    let mut fields = out
        .split_whitespace()
        .map(|f| f.parse::<u64>().expect("number"));
    let (len, blocks) = (fields.next().expect("size"), fields.next().expect("blocks"));
    assert_eq!(len, 1 << 40, "{out}");
    assert!(blocks < 2048, "still sparse in the copy: {blocks} blocks");
    // Zeros where the holes are, the data where it was.
    sh(&s, &copy, "cmp -n 1048576 /big /dev/zero");
    let out = sh(
        &s,
        &copy,
        "dd if=/big bs=1 skip=549755813888 count=8 2>/dev/null",
    );
    assert_eq!(out, "datadata");
    drop(cleanup);
    let r = s.request("DELETE", &format!("/v2/snapshots/{snapshot}"), KEY, None);
    assert!(r.status < 300, "{}", r.text());
}
