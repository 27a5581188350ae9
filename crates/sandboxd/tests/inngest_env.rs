//! `X-Inngest-Env` as the spec says: a workspace-scoped key selects its workspace (the
//! header ignored); an account-scoped key must name exactly one existing environment.

mod inngest_api;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use inngest_api::{Api, MASTER};
use sandboxd_engine::ALL_PERMISSIONS;

fn list(env: Option<&str>) -> axum::http::request::Builder {
    let req = Request::get("/v2/sandboxes");
    match env {
        Some(env) => req.header("x-inngest-env", env),
        None => req,
    }
}

#[tokio::test]
async fn account_scoped_key_needs_a_matching_environment() {
    Api::run(|api| async move {
        let account = api
            .engine
            .create_key(None, vec![ALL_PERMISSIONS.into()], vec![])
            .expect("account key");
        let send = |env: Option<&'static str>| {
            let (api, account) = (api.clone(), account.clone());
            async move { api.send(Some(&account), list(env), Body::empty()).await }
        };
        send(None).await.expect(400, "invalid_request");
        send(Some("")).await.expect(400, "invalid_request");
        send(Some("nowhere")).await.expect(400, "invalid_request");
        let missing = send(None).await.json();
        assert!(
            missing["errors"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("X-Inngest-Env")),
            "{missing}"
        );

        // `production` is the default workspace, `staging` the other one: each sees
        // only its own sandboxes.
        let id = api.sandbox("env-prod").await;
        let prod = send(Some("production")).await;
        assert_eq!(prod.status, StatusCode::OK);
        assert_eq!(prod.json()["data"][0]["id"], id.as_str());
        let staging = send(Some("staging")).await;
        assert_eq!(staging.status, StatusCode::OK);
        assert_eq!(staging.json()["data"].as_array().map(Vec::len), Some(0));
        let get = Request::get(format!("/v2/sandboxes/{id}")).header("x-inngest-env", "staging");
        api.send(Some(&account), get, Body::empty())
            .await
            .expect(404, "sandbox_not_found");
    })
    .await;
}

#[tokio::test]
async fn workspace_scoped_keys_ignore_the_header() {
    Api::run(|api| async move {
        let id = api.sandbox("env-master").await;
        for env in [None, Some("production"), Some("staging"), Some("nowhere")] {
            let reply = api.send(Some(MASTER), list(env), Body::empty()).await;
            assert_eq!(reply.status, StatusCode::OK, "{env:?}");
            assert_eq!(reply.json()["data"][0]["id"], id.as_str(), "{env:?}");
        }
        // The other workspace's key still sees only its own (empty) workspace, even
        // when it names the default workspace's environment.
        let other = api
            .send(
                Some(&api.other_key),
                list(Some("production")),
                Body::empty(),
            )
            .await;
        assert_eq!(other.status, StatusCode::OK);
        assert_eq!(other.json()["data"].as_array().map(Vec::len), Some(0));
    })
    .await;
}

#[tokio::test]
async fn environment_names_are_unique() {
    Api::run(|api| async move {
        let again = api
            .engine
            .create_workspace("dup", [("inngest".into(), "staging".into())].into());
        assert!(
            again.is_err(),
            "a second `staging` environment was accepted"
        );
    })
    .await;
}
