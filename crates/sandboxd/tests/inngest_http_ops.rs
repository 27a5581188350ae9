//! HTTP-level tests of the Inngest dialect's runtime operations (root; real sandboxes):
//! exec limits, process errors, output retention, files, streams and lifecycle codes.

mod inngest_api;

use axum::http::{header, Method, Request, StatusCode};
use base64::Engine as _;
use inngest_api::{Api, MASTER};
use serde_json::{json, Value};

fn decode(v: &Value) -> String {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v.as_str().unwrap_or(""))
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::test]
async fn exec_rules_and_limits() {
    Api::run(|api| async move {
        let id = api.sandbox("exec-rules").await;
        let exec = format!("/v2/sandboxes/{id}/exec");
        let ok = api.post(&exec, json!({"command": ["/bin/sh", "-c", "printf 'tests passed\\n'; exit 4"], "cwd": "/tmp", "timeout": "1m30s"})).await;
        assert_eq!(ok.status, StatusCode::OK);
        let data = &ok.json()["data"];
        assert_eq!((decode(&data["stdout"]).as_str(), data["exitCode"].as_i64(), data["encoding"].as_str()), ("tests passed\n", Some(4), Some("base64")));
        api.post(&exec, json!({"command": ["sh", "-c", "true"]})).await.expect(400, "invalid_field_format");
        api.post(&exec, json!({"command": []})).await.expect(400, "invalid_field_format");
        api.post(&exec, json!({"command": "/bin/true"})).await.expect(400, "invalid_field_format");
        api.post(&exec, json!({"command": ["/bin/true"], "cwd": "tmp"})).await.expect(400, "invalid_field_format");
        api.post(&exec, json!({"command": ["/bin/true"], "environment": {"A=B": "x"}})).await.expect(400, "invalid_field_format");
        for timeout in ["0s", "5m1s", "10", "abc", "-1s"] {
            api.post(&exec, json!({"command": ["/bin/true"], "timeout": timeout})).await.expect(400, "invalid_field_format");
        }
        api.post(&exec, json!({"command": ["/bin/sleep", "30"], "timeout": "200ms"})).await.expect(504, "sandbox_exec_timed_out");
        let flood = json!({"command": ["/bin/sh", "-c", "head -c 5000000 /dev/zero"]});
        api.post(&exec, flood).await.expect(413, "sandbox_exec_output_too_large");
    })
    .await;
}

#[tokio::test]
async fn process_errors_and_output_retention() {
    Api::run(|api| async move {
        let id = api.sandbox("proc-rules").await;
        let procs = format!("/v2/sandboxes/{id}/processes");
        let sleeper = api
            .post(&procs, json!({"command": ["/bin/sleep", "30"]}))
            .await;
        assert_eq!(sleeper.status, StatusCode::CREATED, "{}", sleeper.json());
        let pid = sleeper.json()["data"]["id"]
            .as_str()
            .expect("id")
            .to_owned();
        assert_eq!(sleeper.json()["data"]["state"], "RUNNING");
        let one = format!("{procs}/{pid}");
        api.post(&format!("{one}/wait?timeout=100ms"), json!(null))
            .await
            .expect(504, "sandbox_process_wait_timed_out");
        api.post(&format!("{one}/wait?timeout=6m"), json!(null))
            .await
            .expect(400, "invalid_field_format");
        api.get(&format!("{one}/output?tailBytes=524289"))
            .await
            .expect(400, "invalid_field_format");
        api.get(&format!("{one}/output?tailBytes=-1"))
            .await
            .expect(400, "invalid_field_format");
        for signal in [0, 65] {
            api.post(&format!("{one}/signals"), json!({"signal": signal}))
                .await
                .expect(400, "invalid_field_format");
        }
        api.post(&format!("{one}/signals"), json!({"signal": 9, "extra": 1}))
            .await
            .expect(400, "invalid_request");
        let missing = "6f1c2d52-8a57-4c4b-9a42-3f6a43d1a001";
        api.get(&format!("{procs}/{missing}"))
            .await
            .expect(404, "sandbox_process_not_found");
        let killed = api
            .post(
                &format!("{one}/signals"),
                json!({"signal": 9, "includeChildren": true}),
            )
            .await;
        assert_eq!(killed.status, StatusCode::NO_CONTENT);
        let waited = api.post(&format!("{one}/wait"), json!(null)).await.json();
        assert_eq!(
            (
                waited["data"]["state"].as_str(),
                waited["data"]["terminationSignal"].as_i64()
            ),
            (Some("KILLED"), Some(9))
        );
        assert!(waited["data"].get("exitCode").is_none(), "{waited}");
        // Only the newest 32 output rings are retained.
        for _ in 0..32 {
            let started = api.post(&procs, json!({"command": ["/bin/true"]})).await;
            assert_eq!(started.status, StatusCode::CREATED);
        }
        api.get(&format!("{one}/output"))
            .await
            .expect(404, "sandbox_process_output_not_retained");
        api.get(&format!("{one}/output/stream"))
            .await
            .expect(404, "sandbox_process_output_not_retained");
        let page = api.get(&format!("{procs}?limit=20")).await.json();
        assert_eq!(
            (
                page["data"].as_array().map(Vec::len),
                &page["page"]["hasMore"]
            ),
            (Some(20), &json!(true))
        );
        let cursor = page["page"]["cursor"].as_str().expect("cursor");
        let rest = api
            .get(&format!("{procs}?limit=20&cursor={cursor}"))
            .await
            .json();
        assert_eq!(rest["data"].as_array().map(Vec::len), Some(13));
        assert!(
            page["data"][19]["id"].as_str() < rest["data"][0]["id"].as_str(),
            "sorted by UUID"
        );
    })
    .await;
}

#[tokio::test]
async fn files_streams_and_lifecycle() {
    Api::run(|api| async move {
        let id = api.sandbox("files-rules").await;
        let files = format!("/v2/sandboxes/{id}/files");
        let put = |q: &str, body: &'static str| {
            let (api, uri) = (api.clone(), format!("{files}?{q}"));
            async move {
                api.raw(Method::PUT, &uri, "application/octet-stream", body)
                    .await
            }
        };
        put("path=tmp/x", "a")
            .await
            .expect(400, "invalid_field_format");
        put("path=/tmp/x&mode=0800", "a")
            .await
            .expect(400, "invalid_field_format");
        put("path=/tmp/x&mode=0000", "a")
            .await
            .expect(400, "invalid_field_format");
        put("mode=0644", "a").await.expect(400, "invalid_request");
        put("path=/tmp", "a")
            .await
            .expect(400, "invalid_field_format");
        let big = Request::put(format!("{files}?path=/tmp/big"))
            .header(header::CONTENT_LENGTH, 100 * 1024 * 1024 + 1);
        api.send(Some(MASTER), big, axum::body::Body::empty())
            .await
            .expect(413, "sandbox_file_too_large");
        let written = put("path=/tmp/x&mode=0600", "abc").await;
        assert_eq!(
            written.json()["data"],
            json!({"path": "/tmp/x", "bytesWritten": 3})
        );
        let got = api.get(&format!("{files}?path=/tmp/x")).await;
        assert_eq!(
            (
                &got.body[..],
                got.headers["x-sandbox-file-mode"].to_str().ok()
            ),
            (&b"abc"[..], Some("0600"))
        );
        api.get(&format!("{files}?path=/tmp/none"))
            .await
            .expect(404, "sandbox_file_not_found");
        // What the sandbox's own filesystem refuses is the caller's mistake, not the
        // server's: a read-only mount (the host's /usr), a name too long, a file its
        // root may not read (an outside audit got 500 for each).
        put("path=/usr/bin/new", "a")
            .await
            .expect(400, "invalid_field_format");
        let long = format!("{files}?path=/tmp/{}", "a".repeat(300));
        api.get(&long).await.expect(400, "invalid_field_format");
        put(&format!("path=/tmp/{}", "a".repeat(300)), "a")
            .await
            .expect(400, "invalid_field_format");
        api.get(&format!("/v2/sandboxes/{id}/logs?follow=yes"))
            .await
            .expect(400, "invalid_field_format");
        let logs = api.get(&format!("/v2/sandboxes/{id}/logs")).await;
        assert_eq!(
            (
                logs.status,
                logs.headers[header::CONTENT_TYPE].to_str().ok()
            ),
            (StatusCode::OK, Some("application/x-ndjson"))
        );
        let paused = api
            .post(&format!("/v2/sandboxes/{id}/pause"), json!(null))
            .await;
        assert_eq!(paused.json()["data"]["status"], "PAUSED");
        let exec = api
            .post(
                &format!("/v2/sandboxes/{id}/exec"),
                json!({"command": ["/bin/true"]}),
            )
            .await;
        assert_eq!(exec.status, StatusCode::CONFLICT, "{}", exec.json());
        let resumed = api
            .post(&format!("/v2/sandboxes/{id}/resume"), json!(null))
            .await;
        assert_eq!(resumed.json()["data"]["status"], "RUNNING");
        let snap = api
            .raw(
                Method::POST,
                &format!("/v2/sandboxes/{id}/snapshots"),
                "application/json",
                "",
            )
            .await;
        assert_eq!(snap.status, StatusCode::CREATED, "{}", snap.json());
        let snap_id = snap.json()["data"]["id"].as_str().expect("id").to_owned();
        let deleted = api
            .send(
                Some(MASTER),
                Request::delete(format!("/v2/snapshots/{snap_id}")),
                axum::body::Body::empty(),
            )
            .await;
        assert_eq!(deleted.status, StatusCode::NO_CONTENT);
        api.get(&format!("/v2/snapshots/{snap_id}"))
            .await
            .expect(404, "sandbox_snapshot_not_found");
    })
    .await;
}

#[tokio::test]
async fn destroy_does_not_wait_for_a_running_exec() {
    Api::run(|api| async move {
        let id = api.sandbox("exec-destroy").await;
        let exec = format!("/v2/sandboxes/{id}/exec");
        let long = json!({"command": ["/bin/sh", "-c", "touch /tmp/started; sleep 1000"], "timeout": "5m"});
        let running = api.post(&exec, long);
        let destroy = async {
            let started = format!("/v2/sandboxes/{id}/files?path=/tmp/started");
            for _ in 0..500 {
                if api.get(&started).await.status == StatusCode::OK {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            api.send(Some(MASTER), Request::delete(format!("/v2/sandboxes/{id}")), axum::body::Body::empty()).await
        };
        // Were destroy to wait for the exec, the exec would end by its own 5m timeout
        // (504) first; instead destroy ends the agent and the exec fails as unavailable.
        let (ended, destroyed) = tokio::join!(running, destroy);
        assert!(
            [StatusCode::ACCEPTED, StatusCode::NO_CONTENT].contains(&destroyed.status),
            "destroy answered {}",
            destroyed.status
        );
        ended.expect(503, "compute_unavailable");
        assert_eq!(api.get(&format!("/v2/sandboxes/{id}")).await.json()["data"]["status"], "TERMINATED");
    })
    .await;
}

/// A process whose command line is longer than the server keeps (1 KiB, 64 arguments)
/// is listed with the kept prefix and `commandTruncated: true`, in the list and alone;
/// a short one has no such field (the spec's shape).
#[tokio::test]
async fn a_long_command_line_is_listed_as_truncated() {
    Api::run(|api| async move {
        let id = api.sandbox("proc-truncated").await;
        let procs = format!("/v2/sandboxes/{id}/processes");
        let mut long = vec!["/bin/true".to_owned()];
        long.extend((0..100).map(|i| format!("argument-{i:04}")));
        let started = api.post(&procs, json!({"command": long})).await;
        assert_eq!(started.status, StatusCode::CREATED, "{}", started.json());
        let long_id = started.json()["data"]["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let short = api
            .post(&procs, json!({"command": ["/bin/true", "short"]}))
            .await;
        assert_eq!(short.status, StatusCode::CREATED, "{}", short.json());
        let short_id = short.json()["data"]["id"].as_str().expect("id").to_owned();

        let page = api.get(&procs).await.json();
        let listed = page["data"].as_array().expect("data");
        let find = |pid: &str| {
            listed
                .iter()
                .find(|p| p["id"] == pid)
                .expect("listed")
                .clone()
        };
        let l = find(&long_id);
        assert_eq!(l["commandTruncated"], true, "{l}");
        let kept = l["command"].as_array().expect("command");
        assert!(kept.len() <= 64 && kept.len() < 101, "{l}");
        assert_eq!(kept[0], "/bin/true");
        let s = find(&short_id);
        assert!(s.get("commandTruncated").is_none(), "{s}");
        assert_eq!(s["command"], json!(["/bin/true", "short"]));
        let alone = api.get(&format!("{procs}/{long_id}")).await.json();
        assert_eq!(alone["data"]["commandTruncated"], true, "{alone}");
    })
    .await;
}
