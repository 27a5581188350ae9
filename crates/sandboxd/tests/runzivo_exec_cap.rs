//! Runzivo streamed exec delivers every byte up to its 8 MiB cap, in order and without
//! holes, to a fast or a slow reader; past the cap it ends `exit_code: 137,
//! truncated: true` after exactly the first 8 MiB.

mod runzivo_api;
mod seq_data;

use futures_util::StreamExt;
use http_body_util::BodyStream;
use runzivo_api::{collect, Server};
use seq_data::{assert_same, seq_cmd, seq_prefix};
use serde_json::{json, Value};
use std::time::Duration;

const CAP: usize = 8 * 1024 * 1024;

fn ending(truncated: bool) -> Value {
    let code = if truncated { 137 } else { 0 };
    json!({"type":"exit","exit_code":code,"timed_out":false,"truncated":truncated})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fast_producer_gets_every_byte_up_to_the_cap() {
    let s = Server::start(30);
    let id = s.create().await;
    let want = seq_prefix(CAP);
    for (len, truncated) in [(CAP, false), (CAP + 1, true), (3 * CAP, true)] {
        let lines = s.exec(&id, &seq_cmd(len), Value::Null).await;
        let (out, exit) = collect(&lines);
        assert_same(&out, &want, &format!("{len} bytes written"));
        assert_eq!(exit, ending(truncated), "{len} bytes written");
    }
    let lines = s
        .exec(&id, &format!("head -c {CAP} /dev/zero"), Value::Null)
        .await;
    let (out, exit) = collect(&lines);
    assert_eq!(out.len(), CAP);
    assert_eq!(exit, ending(false));
}

/// Reads a streamed NDJSON answer 64 KiB at a time with a pause after each read; also
/// returns the server's peak RSS (KiB) seen while it waited for this reader.
async fn read_slowly(s: &Server, id: &str, cmd: &str) -> (Vec<Value>, u64) {
    let body = json!({ "cmd": cmd }).to_string();
    let path = s.path(&format!("/{id}/exec"));
    let resp = s
        .open(
            "POST",
            &path,
            Some(&s.keys.writer),
            Some("application/json"),
            body,
        )
        .await;
    assert_eq!(resp.status(), 200);
    let mut body = BodyStream::new(resp.into_body());
    let (mut raw, mut since_pause, mut peak) = (Vec::new(), 0usize, 0u64);
    while let Some(frame) = body.next().await {
        if let Ok(data) = frame.expect("body").into_data() {
            since_pause += data.len();
            raw.extend_from_slice(&data);
        }
        if since_pause >= 64 * 1024 {
            since_pause = 0;
            peak = peak.max(s.rss_kib());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    (runzivo_api::ndjson(&raw), peak)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_reader_gets_every_byte_up_to_the_cap() {
    let s = Server::start(30);
    let id = s.create().await;
    let before = s.rss_kib();
    let (lines, peak) = read_slowly(&s, &id, &seq_cmd(3 * CAP)).await;
    let (out, exit) = collect(&lines);
    assert_same(&out, &seq_prefix(CAP), "a slow reader of 24 MiB");
    assert_eq!(exit, ending(true));
    // The producer waited for the reader: the server held a bounded window of the
    // output, never the whole 8 MiB it delivered (base64 would make that 11 MiB).
    eprintln!("server RSS {before} KiB before, peak {peak} KiB while the reader lagged");
    assert!(
        peak < before + 8 * 1024,
        "{peak} KiB at peak, {before} KiB before"
    );
}
