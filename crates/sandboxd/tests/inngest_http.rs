//! HTTP-level tests of the Inngest dialect (root; real engine and Linux backend): auth,
//! routing, body and query validation, ID handling and workspace isolation.

mod inngest_api;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use inngest_api::{Api, MASTER};
use serde_json::json;

#[tokio::test]
async fn authentication_and_routing() {
    Api::run(|api| async move {
        let no_key = api
            .send(None, Request::get("/v2/sandboxes"), Body::empty())
            .await;
        no_key.expect(401, "unauthorized");
        let wrong = api
            .send(
                Some("not-a-key"),
                Request::get("/v2/sandboxes"),
                Body::empty(),
            )
            .await;
        wrong.expect(401, "unauthorized");
        let basic =
            Request::get("/v2/sandboxes").header(header::AUTHORIZATION, format!("Basic {MASTER}"));
        api.send(None, basic, Body::empty())
            .await
            .expect(401, "unauthorized");
        // The master key is scoped to `default`: any X-Inngest-Env is ignored.
        let env = Request::get("/v2/sandboxes").header("x-inngest-env", "nowhere");
        assert_eq!(
            api.send(Some(MASTER), env, Body::empty()).await.status,
            StatusCode::OK
        );
        let env = Request::get("/v2/sandboxes").header("x-inngest-env", "production");
        assert_eq!(
            api.send(Some(MASTER), env, Body::empty()).await.status,
            StatusCode::OK
        );
        api.get("/v2/nothing").await.expect(404, "not_found");
        let list = api.get("/v2/sandboxes").await;
        assert_eq!(list.headers[header::CACHE_CONTROL], "no-store");
        let v = list.json();
        assert_eq!(v["data"], json!([]));
        assert_eq!(v["page"], json!({"hasMore": false, "limit": 50}));
        let fetched = v["metadata"]["fetchedAt"].as_str().expect("fetchedAt");
        assert_eq!(
            fetched.len(),
            "2026-07-28T19:00:00.123456789Z".len(),
            "{fetched}"
        );
    })
    .await;
}

#[tokio::test]
async fn create_body_validation() {
    Api::run(|api| async move {
        let bad = |body: &'static str| {
            let api = api.clone();
            async move {
                api.raw(Method::POST, "/v2/sandboxes", "application/json", body)
                    .await
            }
        };
        bad("{").await.expect(400, "invalid_request");
        bad("").await.expect(400, "invalid_request");
        bad(r#"{"name":"a","vcpu":1,"memoryMb":1} {}"#)
            .await
            .expect(400, "invalid_request");
        bad(r#"{"name":"a","vcpu":1,"memoryMb":1,"template":"x"}"#)
            .await
            .expect(400, "invalid_request");
        // `image` is sandboxd's extension: an image that is not stored is a bad field.
        bad(r#"{"name":"a","vcpu":1,"memoryMb":1,"image":"x"}"#)
            .await
            .expect(400, "invalid_field_format");
        bad(r#"{"name":"a","vcpu":1}"#)
            .await
            .expect(400, "invalid_request");
        bad(r#"{"name":"a","vcpu":"1","memoryMb":1}"#)
            .await
            .expect(400, "invalid_field_format");
        bad(r#"{"name":"a","vcpu":-1,"memoryMb":1}"#)
            .await
            .expect(400, "invalid_field_format");
        bad(r#"{"name":"a","vcpu":4294967296,"memoryMb":1}"#)
            .await
            .expect(400, "invalid_field_format");
        bad(r#"{"name":"a","vcpu":0,"memoryMb":1}"#)
            .await
            .expect(400, "invalid_field_format");
        bad(r#"{"name":"Upper","vcpu":1,"memoryMb":1}"#)
            .await
            .expect(400, "invalid_field_format");
        bad(r#"{"name":"a","snapshotId":"NOT-A-UUID"}"#)
            .await
            .expect(400, "invalid_field_format");
        let text = api
            .raw(
                Method::POST,
                "/v2/sandboxes",
                "text/plain",
                r#"{"name":"a"}"#,
            )
            .await;
        text.expect(415, "invalid_request");
        let huge = format!(
            r#"{{"name":"a","vcpu":1,"memoryMb":1,"environment":{{"X":"{}"}}}}"#,
            "x".repeat(1 << 20)
        );
        let huge = api
            .raw(Method::POST, "/v2/sandboxes", "application/json", huge)
            .await;
        huge.expect(413, "request_too_large");
        let missing = "/v2/snapshots/6f1c2d52-8a57-4c4b-9a42-3f6a43d1a001";
        let clone = api
            .post(
                "/v2/sandboxes",
                json!({"name": "c", "snapshotId": &missing[14..]}),
            )
            .await;
        clone.expect(404, "sandbox_snapshot_not_found");
    })
    .await;
}

#[tokio::test]
async fn ids_and_query_parameters() {
    Api::run(|api| async move {
        for limit in ["0", "251", "x", "-1"] {
            api.get(&format!("/v2/sandboxes?limit={limit}"))
                .await
                .expect(400, "invalid_field_format");
        }
        let id = "b066bdf7-a57b-4d8b-a1a7-76eab1f91273";
        api.get(&format!("/v2/sandboxes/{id}"))
            .await
            .expect(404, "sandbox_not_found");
        let upper = id.to_uppercase();
        api.get(&format!("/v2/sandboxes/{upper}"))
            .await
            .expect(404, "sandbox_not_found");
        api.get("/v2/sandboxes/not-a-uuid")
            .await
            .expect(404, "sandbox_not_found");
        api.get(&format!("/v2/snapshots/{id}"))
            .await
            .expect(404, "sandbox_snapshot_not_found");
        api.get(&format!("/v2/sandboxes/{id}/files?path=/etc/hostname"))
            .await
            .expect(404, "sandbox_file_not_found");
        api.get(&format!("/v2/sandboxes/{id}/processes/{id}"))
            .await
            .expect(404, "sandbox_not_found");
        api.get("/v2/snapshots?name=Bad%20Name")
            .await
            .expect(400, "invalid_field_format");
    })
    .await;
}

#[tokio::test]
async fn workspaces_do_not_see_each_other() {
    Api::run(|api| async move {
        let id = api.sandbox("shared-name").await;
        let as_other = |req: axum::http::request::Builder| {
            let api = api.clone();
            async move {
                api.send(Some(&api.other_key.clone()), req, Body::empty())
                    .await
            }
        };
        as_other(Request::get(format!("/v2/sandboxes/{id}")))
            .await
            .expect(404, "sandbox_not_found");
        as_other(Request::delete(format!("/v2/sandboxes/{id}")))
            .await
            .expect(404, "sandbox_not_found");
        let exec = Request::post(format!("/v2/sandboxes/{id}/exec"))
            .header(header::CONTENT_TYPE, "application/json");
        let exec = api
            .send(
                Some(&api.other_key.clone()),
                exec,
                Body::from(r#"{"command":["/bin/true"]}"#),
            )
            .await;
        exec.expect(404, "sandbox_not_found");
        let list = as_other(Request::get("/v2/sandboxes")).await;
        assert_eq!(list.json()["data"], json!([]));
        let same = api
            .post(
                "/v2/sandboxes",
                json!({"name": "shared-name", "vcpu": 1, "memoryMb": 256}),
            )
            .await;
        assert_eq!(
            same.status,
            StatusCode::OK,
            "same name and config returns the existing one"
        );
        assert_eq!(same.json()["data"]["id"], json!(id));
        let taken = api
            .post(
                "/v2/sandboxes",
                json!({"name": "shared-name", "vcpu": 2, "memoryMb": 256}),
            )
            .await;
        taken.expect(409, "sandbox_name_taken");
        let gone = api
            .send(
                Some(MASTER),
                Request::delete(format!("/v2/sandboxes/{id}")),
                Body::empty(),
            )
            .await;
        assert!(
            matches!(gone.status.as_u16(), 202 | 204),
            "{:?}",
            gone.status
        );
        let after = api.get(&format!("/v2/sandboxes/{id}")).await.json();
        assert!(
            matches!(
                after["data"]["status"].as_str(),
                Some("TERMINATING" | "TERMINATED")
            ),
            "{after}"
        );
        assert!(after["data"]["endedAt"].is_string() || after["data"]["status"] == "TERMINATING");
    })
    .await;
}
