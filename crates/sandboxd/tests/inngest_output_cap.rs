//! Inngest output byte for byte: captured exec returns every byte up to its 4 MiB cap
//! and 413 past it; a process output stream (a best-effort ring) delivers contiguous
//! output and, when its reader falls off the ring, says so with an error frame instead
//! of skipping bytes silently.

mod inngest_api;
mod seq_data;

use axum::http::StatusCode;
use base64::Engine as _;
use http_body_util::BodyExt;
use inngest_api::Api;
use seq_data::{assert_contiguous, assert_same, seq_cmd, seq_prefix};
use serde_json::{json, Value};
use std::time::Duration;

const CAP: usize = 4 * 1024 * 1024;

fn b64(v: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str().expect("base64 string"))
        .expect("base64")
}

#[tokio::test]
async fn captured_exec_returns_every_byte_up_to_the_cap() {
    Api::run(|api| async move {
        let id = api.sandbox("exec-cap").await;
        let exec = format!("/v2/sandboxes/{id}/exec");
        let run = |len: usize| json!({"command": ["/bin/sh", "-c", seq_cmd(len)]});
        let at = api.post(&exec, run(CAP)).await;
        assert_eq!(at.status, StatusCode::OK, "{}", at.json());
        assert_same(
            &b64(&at.json()["data"]["stdout"]),
            &seq_prefix(CAP),
            "exec of the cap",
        );
        assert_eq!(at.json()["data"]["exitCode"], 0);
        for len in [CAP + 1, 3 * CAP] {
            api.post(&exec, run(len))
                .await
                .expect(413, "sandbox_exec_output_too_large");
        }
    })
    .await;
}

/// Starts a background process writing `len` bytes of numbered lines; its id.
async fn start(api: &Api, id: &str, len: usize) -> String {
    let r = api
        .post(
            &format!("/v2/sandboxes/{id}/processes"),
            json!({"command": ["/bin/sh", "-c", seq_cmd(len)]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    r.json()["data"]["id"].as_str().expect("id").to_owned()
}

/// Reads a process output stream, pausing `pause` after every 64 KiB; the decoded
/// bytes of its `log` frames and its error frame, if any (which must be last).
async fn follow(api: &Api, uri: &str, pause: Duration) -> (Vec<u8>, Option<Value>) {
    let resp = api.open(uri).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let (mut raw, mut since_pause) = (Vec::new(), 0usize);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("body").into_data() {
            since_pause += data.len();
            raw.extend_from_slice(&data);
        }
        if since_pause >= 64 * 1024 && !pause.is_zero() {
            since_pause = 0;
            tokio::time::sleep(pause).await;
        }
    }
    let frames: Vec<Value> = raw
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("one JSON value per line"))
        .collect();
    let mut out = Vec::new();
    let mut error = None;
    for (i, f) in frames.iter().enumerate() {
        match f["type"].as_str() {
            Some("log") => out.extend(b64(&f["data"])),
            Some("error") => {
                assert_eq!(i, frames.len() - 1, "an error frame ends the stream");
                error = Some(f.clone());
            }
            _ => panic!("unexpected frame {f}"),
        }
    }
    (out, error)
}

/// What a follower of `3 × CAP` bytes may see: one contiguous run of the output that
/// either reaches its end or is followed by the error frame that says it fell behind.
async fn check_follow(pause: Duration) {
    Api::run(|api| async move {
        let id = api.sandbox("follow").await;
        let len = 3 * CAP;
        let pid = start(&api, &id, len).await;
        let uri = format!("/v2/sandboxes/{id}/processes/{pid}/output/stream?tailBytes=0");
        let (out, error) = follow(&api, &uri, pause).await;
        let all = seq_prefix(len);
        assert_contiguous(&out, &all, "followed output");
        match error {
            None => assert!(all.ends_with(&out), "ended early without an error frame"),
            Some(e) => assert_eq!(
                e["errors"][0]["code"], "sandbox_process_output_not_retained",
                "{e}"
            ),
        }
        // What stays retained is the newest contiguous output, up to the end.
        let kept = api
            .get(&format!("/v2/sandboxes/{id}/processes/{pid}/output"))
            .await
            .json();
        let kept: Vec<u8> = kept["data"]["chunks"]
            .as_array()
            .expect("chunks")
            .iter()
            .flat_map(|c| b64(&c["data"]))
            .collect();
        assert!(!kept.is_empty() && all.ends_with(&kept), "retained tail");
    })
    .await;
}

#[tokio::test]
async fn a_fast_follower_sees_contiguous_output_or_an_error() {
    check_follow(Duration::ZERO).await;
}

#[tokio::test]
async fn a_slow_follower_sees_contiguous_output_then_an_error() {
    check_follow(Duration::from_millis(50)).await;
}
