//! A fast writer and a slow reader on Runzivo's streamed exec and WebSocket terminal,
//! over a real socket to the real server: every byte arrives in order exactly once (or,
//! past the exec's 8 MiB cap, an exact prefix then `truncated: true` and 137), and the
//! server's memory stays bounded while the reader lags.

mod runzivo_api;
mod terminal_reader;

use http_body_util::BodyExt;
use runzivo_api::{collect, Server};
use serde_json::{json, Value};
use std::time::Duration;
use terminal_reader::{sha, Pace};

/// Growth of the server's RSS allowed while a reader lags (a memory bound, not a time).
const RSS_BOUND_KIB: u64 = 300 * 1024;

/// The sha256 of the first `len` bytes of `file` in the sandbox, computed inside it.
async fn sha_inside(s: &Server, id: &str, file: &str, len: usize) -> String {
    let out = s.sh(id, &format!("head -c {len} {file} | sha256sum")).await;
    out.split_whitespace().next().expect("sum").to_owned()
}

/// Runs `cmd` with exec and reads the answer slowly: a pause first (the writer runs
/// ahead), then frame by frame with pauses. Returns the NDJSON lines and the peak RSS.
async fn slow_exec(s: &Server, id: &str, cmd: &str) -> (Vec<Value>, u64) {
    let body = json!({ "cmd": cmd }).to_string();
    let path = s.path(&format!("/{id}/exec"));
    let response = s
        .open(
            "POST",
            &path,
            Some(&s.keys.writer),
            Some("application/json"),
            body,
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut peak = s.rss_kib();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut raw = Vec::new();
    let mut frames = 0u64;
    while let Some(frame) = body.frame().await {
        raw.extend(frame.expect("frame").into_data().unwrap_or_default());
        frames += 1;
        if frames.is_multiple_of(16) {
            peak = peak.max(s.rss_kib());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    (runzivo_api::ndjson(&raw), peak)
}

/// [`slow_exec`] of `cmd` in a new sandbox on a new server, asserting the server's RSS
/// stayed bounded; returns them with the output and the exit line.
async fn lagging_exec(cmd: &str) -> (Server, String, Vec<u8>, Value) {
    let s = Server::start(30);
    let id = s.create().await;
    let before = s.rss_kib();
    let (lines, peak) = slow_exec(&s, &id, cmd).await;
    eprintln!("server RSS {before} KiB before, peak {peak} KiB while the reader lagged");
    assert!(peak < before + RSS_BOUND_KIB, "{peak} KiB");
    let (out, exit) = collect(&lines);
    (s, id, out, exit)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_exec_reader_gets_every_byte_under_the_cap() {
    // About 6.1 MiB of base64: under the 8 MiB cap.
    let cmd = "head -c 4718592 /dev/urandom | base64 | tee /tmp/w";
    let (s, id, out, exit) = lagging_exec(cmd).await;
    assert_eq!(exit["exit_code"], 0, "{exit}");
    assert_eq!(exit["truncated"], false, "{exit}");
    let total: usize = s.sh(&id, "wc -c < /tmp/w").await.trim().parse().unwrap();
    assert_eq!(out.len(), total, "bytes lost with no marker");
    assert_eq!(sha(&out), sha_inside(&s, &id, "/tmp/w", total).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_exec_reader_past_the_cap_gets_an_exact_prefix_then_truncated() {
    // About 32 MiB of base64, written to a file first so its hash is known whole.
    let cmd = "head -c 25165824 /dev/urandom | base64 > /tmp/w; cat /tmp/w";
    let (s, id, out, exit) = lagging_exec(cmd).await;
    assert_eq!(
        exit,
        json!({"type":"exit","exit_code":137,"timed_out":false,"truncated":true})
    );
    assert_eq!(out.len(), 8 * 1024 * 1024);
    assert_eq!(sha(&out), sha_inside(&s, &id, "/tmp/w", out.len()).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_terminal_reader_gets_every_byte() {
    let s = Server::start(30);
    let id = s.create().await;
    let mut ws = s.terminal(&id, "").await;
    let before = s.rss_kib();
    // About 2 MiB of base64, far past the PTY's and the socket's buffers.
    let rss = || s.rss_kib();
    let read = terminal_reader::send_and_read(&mut ws, 1572864, Pace::Slow { rss: &rss }).await;
    let peak = read.peak_kib;
    eprintln!("server RSS {before} KiB before, peak {peak} KiB while the reader lagged");
    assert!(peak < before + RSS_BOUND_KIB, "{peak} KiB");
    let got = &read.got;
    let file = terminal_reader::FILE;
    let total: usize = s
        .sh(&id, &format!("wc -c < {file}"))
        .await
        .trim()
        .parse()
        .unwrap();
    assert_eq!(got.len(), total, "bytes lost or doubled in the terminal");
    assert_eq!(sha(got), sha_inside(&s, &id, file, total).await);
    let _ = ws.close(None).await;
}
