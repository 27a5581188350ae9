//! `GET /logs?follow=true` keeps the stream open while the sandbox lives and ends it
//! with the dialect's terminal error frame (`sandbox_not_running`) once the sandbox is
//! destroyed, so a client can tell that end from a dropped connection.

mod inngest_api;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use base64::Engine as _;
use http_body_util::BodyExt;
use inngest_api::{Api, MASTER};
use serde_json::{json, Value};
use tower::ServiceExt;

#[tokio::test]
async fn follow_ends_when_the_sandbox_is_destroyed() {
    Api::run(|api| async move {
        let id = api.sandbox("logs-follow").await;
        let exec = json!({"command": ["/bin/sh", "-c", "echo before-follow"]});
        let reply = api.post(&format!("/v2/sandboxes/{id}/exec"), exec).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());

        let mut body = open_stream(&api, &format!("/v2/sandboxes/{id}/logs?follow=true")).await;

        // The retained log arrives, and the stream stays open for live output.
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains('\n') {
            let frame = body.frame().await.expect("stream open").expect("frame");
            seen.extend(frame.into_data().unwrap_or_default());
        }
        let exec = json!({"command": ["/bin/sh", "-c", "echo while-following"]});
        let reply = api.post(&format!("/v2/sandboxes/{id}/exec"), exec).await;
        assert_eq!(reply.status, StatusCode::OK);
        while !decoded(&seen).contains("while-following") {
            let frame = body.frame().await.expect("stream open").expect("frame");
            seen.extend(frame.into_data().unwrap_or_default());
        }

        destroy(&api, &id).await;
        let rest = body.collect().await.expect("clean end").to_bytes();
        seen.extend(rest);
        let frames = frames(&seen);
        let (last, logs) = frames.split_last().expect("frames");
        assert!(logs.iter().all(|f| f["type"] == "log"), "{frames:?}");
        assert_eq!(last["type"], "error", "no terminal frame: {frames:?}");
        assert_eq!(last["errors"][0]["code"], "sandbox_not_running", "{last}");
        let text = decoded(&seen);
        assert!(text.contains("before-follow\n") && text.contains("while-following\n"));
    })
    .await;
}

#[tokio::test]
async fn a_followed_process_output_ends_with_an_error_frame_when_the_sandbox_ends() {
    Api::run(|api| async move {
        let id = api.sandbox("output-follow").await;
        let started = api
            .post(
                &format!("/v2/sandboxes/{id}/processes"),
                json!({"command": ["/bin/sh", "-c", "echo up; exec sleep 600"]}),
            )
            .await;
        assert_eq!(started.status, StatusCode::CREATED, "{}", started.json());
        let pid = started.json()["data"]["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let uri = format!("/v2/sandboxes/{id}/processes/{pid}/output/stream?tailBytes=0");
        let mut body = open_stream(&api, &uri).await;
        let mut seen = Vec::new();
        while !decoded(&seen).contains("up\n") {
            let frame = body.frame().await.expect("stream open").expect("frame");
            seen.extend(frame.into_data().unwrap_or_default());
        }
        destroy(&api, &id).await;
        seen.extend(body.collect().await.expect("end").to_bytes());
        let frames = frames(&seen);
        let last = frames.last().expect("frames");
        assert_eq!(last["type"], "error", "no terminal frame: {frames:?}");
        assert_eq!(last["errors"][0]["code"], "sandbox_not_running", "{last}");
    })
    .await;
}

/// A GET of the master workspace answered 200; its streamed body.
async fn open_stream(api: &Api, uri: &str) -> Body {
    let req = Request::get(uri)
        .header(header::AUTHORIZATION, format!("Bearer {MASTER}"))
        .body(Body::empty())
        .expect("request");
    let response = sandboxd_server::app(api.engine.clone())
        .oneshot(req)
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body()
}

async fn destroy(api: &Api, id: &str) {
    let destroyed = api
        .send(
            Some(MASTER),
            Request::delete(format!("/v2/sandboxes/{id}")),
            Body::empty(),
        )
        .await;
    assert!(matches!(destroyed.status.as_u16(), 202 | 204));
}

fn frames(raw: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(raw)
        .lines()
        .map(|l| serde_json::from_str(l).expect("NDJSON frame"))
        .collect()
}

/// The concatenated data of the complete `log` frames.
fn decoded(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let complete = text.rsplit_once('\n').map_or("", |(done, _)| done);
    let mut out = Vec::new();
    for line in complete.lines() {
        let frame: Value = serde_json::from_str(line).expect("NDJSON frame");
        if let Some(data) = frame["data"].as_str() {
            out.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .expect("base64"),
            );
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
