//! Abuse limits through a real `sandboxd serve`, one test per dialect: a workspace
//! quota (from the server's environment or a stored `sandboxd quota set` override)
//! refuses the create past it with the dialect's 429 and `Retry-After`, creating
//! nothing, and frees up after a destroy; a create-rate bucket (burst 3, one token an
//! hour: no refill within a test) refuses the fourth create the same way.

mod openrelay;
mod runzivo_api;
mod serve_bin;

use serde_json::{json, Value};
use serve_bin::{cli, Reply, Server};

/// Quota 2 from the environment (or left to an override), burst 3, refill 1 an hour.
const RATE: [(&str, &str); 2] = [
    ("SANDBOXD_CREATE_RATE_BURST", "3"),
    ("SANDBOXD_CREATE_RATE_PER_HOUR", "1"),
];

/// The `Retry-After` seconds of a refusal, checked to be at least `min`.
fn retry_after(headers: impl Fn(&str) -> Option<String>, min: u64) -> u64 {
    let secs: u64 = headers("retry-after")
        .expect("Retry-After header")
        .parse()
        .expect("Retry-After in seconds");
    assert!(secs >= min, "Retry-After {secs} < {min}");
    secs
}

/// Ids of a list answer's items under `field`, sorted.
fn ids(list: &Value, field: &str) -> Vec<String> {
    let mut ids: Vec<String> = list[field]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["id"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

fn header(r: &Reply) -> impl Fn(&str) -> Option<String> + '_ {
    |name| r.header(name).map(String::from)
}

#[test]
fn inngest_quota_and_rate_answer_429_rate_limited() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = "quota-inngest-master";
    let mut env = vec![("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", "2")];
    env.extend(RATE);
    let server = Server::start_with_env(dir.path(), Some(key), &env);
    let body = |n: u32| json!({"name": format!("q{n}"), "vcpu": 1, "memoryMb": 128});
    let mut live = Vec::new();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let list = || {
            ids(
                &server.request("GET", "/v2/sandboxes", key, None).json(),
                "data",
            )
        };
        live.push(server.create_sandbox(key, &body(1)));
        live.push(server.create_sandbox(key, &body(2)));
        let before = list();
        let r = server.request("POST", "/v2/sandboxes", key, Some(&body(3)));
        assert_eq!(
            (r.status, r.json()["errors"][0]["code"].clone()),
            (429, json!("rate_limited")),
            "{}",
            r.text()
        );
        retry_after(header(&r), 1);
        assert_eq!(list(), before, "a refused create made nothing");
        // A destroy frees the quota; the bucket's third token goes to this create.
        server.destroy(key, &live.remove(0));
        live.push(server.create_sandbox(key, &body(4)));
        server.destroy(key, &live.remove(0));
        let before = list();
        let r = server.request("POST", "/v2/sandboxes", key, Some(&body(5)));
        assert_eq!(
            (r.status, r.json()["errors"][0]["code"].clone()),
            (429, json!("rate_limited")),
            "{}",
            r.text()
        );
        assert!(retry_after(header(&r), 60) <= 3600, "one token an hour");
        assert_eq!(list(), before, "a rate-limited create made nothing");
    }));
    for id in &live {
        server.destroy(key, id);
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn openrelay_stored_quota_override_and_rate_answer_429() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = openrelay::Or::start(dir.path(), &RATE);
    let data = dir.path().to_str().expect("utf-8 path");
    let set = cli(
        &[
            "quota",
            "set",
            "--workspace",
            "default",
            "--sandboxes",
            "2",
            "--data-dir",
            data,
        ],
        "",
    );
    assert_eq!(
        String::from_utf8_lossy(&set.stdout),
        "sandboxes: 2\nvcpu: default\nmemory_mb: default\n"
    );
    let shown = cli(
        &[
            "quota",
            "show",
            "--workspace",
            "default",
            "--data-dir",
            data,
        ],
        "",
    );
    assert_eq!(shown.stdout, set.stdout);
    let body = json!({"template": "default", "waitSeconds": 0});
    let a = or.create(&body)["id"].as_str().expect("id").to_owned();
    let b = or.create(&body)["id"].as_str().expect("id").to_owned();
    let before = or.active();
    let r = or.post("/v1/sandboxes", &body);
    assert_eq!(openrelay::code(&r, 429), "QUOTA_EXCEEDED");
    retry_after(header(&r), 1);
    assert_eq!(or.active(), before, "a refused create made nothing");
    or.delete(&a);
    let c = or.create(&body)["id"].as_str().expect("id").to_owned();
    or.delete(&b);
    let before = or.active();
    let r = or.post("/v1/sandboxes", &body);
    assert_eq!(openrelay::code(&r, 429), "RATE_LIMITED");
    assert!(retry_after(header(&r), 60) <= 3600, "one token an hour");
    assert_eq!(or.active(), before, "a rate-limited create made nothing");
    or.delete(&c);
}

/// Ids of the Runzivo test tenant's sandboxes.
async fn rz_list(s: &runzivo_api::Server) -> Vec<String> {
    let r = s
        .call("GET", &s.path(""), Some(&s.keys.reader), None, "")
        .await;
    ids(&r.json(), "data")
}

async fn rz_create(s: &runzivo_api::Server) -> runzivo_api::Reply {
    s.call("POST", &s.path(""), Some(&s.keys.writer), None, "")
        .await
}

async fn rz_delete(s: &runzivo_api::Server, id: &str) {
    let r = s
        .call(
            "DELETE",
            &s.path(&format!("/{id}")),
            Some(&s.keys.writer),
            None,
            "",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json());
}

fn rz_retry_after(r: &runzivo_api::Reply, min: u64) -> u64 {
    retry_after(
        |n| {
            r.headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        },
        min,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn runzivo_quota_and_rate_answer_429() {
    let mut env = vec![("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", "2")];
    env.extend(RATE);
    let s = runzivo_api::Server::start_with_env(30, &env);
    let a = s.create().await;
    let b = s.create().await;
    let before = rz_list(&s).await;
    let r = rz_create(&s).await;
    r.expect(429, "quota_exceeded");
    rz_retry_after(&r, 1);
    assert_eq!(rz_list(&s).await, before, "a refused create made nothing");
    rz_delete(&s, &a).await;
    s.create().await;
    rz_delete(&s, &b).await;
    let before = rz_list(&s).await;
    let r = rz_create(&s).await;
    r.expect(429, "rate_limited");
    assert!(rz_retry_after(&r, 60) <= 3600, "one token an hour");
    assert_eq!(
        rz_list(&s).await,
        before,
        "a rate-limited create made nothing"
    );
}

/// The workspace's snapshot quota (`SANDBOXD_WORKSPACE_QUOTA_SNAPSHOTS`), Inngest: the
/// snapshot past it answers 429 in the dialect's shape and stores nothing; a delete
/// frees it.
#[test]
fn inngest_snapshot_quota_answers_429() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = "quota-snap-master";
    let env = [("SANDBOXD_WORKSPACE_QUOTA_SNAPSHOTS", "2")];
    let server = Server::start_with_env(dir.path(), Some(key), &env);
    let id = server.create_sandbox(key, &json!({"name": "qs", "vcpu": 1, "memoryMb": 128}));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let snapshot = || {
            server.request(
                "POST",
                &format!("/v2/sandboxes/{id}/snapshots"),
                key,
                Some(&json!({})),
            )
        };
        let list = || {
            ids(
                &server.request("GET", "/v2/snapshots", key, None).json(),
                "data",
            )
        };
        let first = snapshot();
        assert_eq!(first.status, 201, "{}", first.text());
        let second = snapshot();
        assert_eq!(second.status, 201, "{}", second.text());
        let before = list();
        assert_eq!(before.len(), 2);
        let r = snapshot();
        assert_eq!(
            (r.status, r.json()["errors"][0]["code"].clone()),
            (429, json!("rate_limited")),
            "{}",
            r.text()
        );
        assert!(r.text().contains("2 snapshots"), "{}", r.text());
        retry_after(header(&r), 1);
        assert_eq!(list(), before, "a refused snapshot stored nothing");
        let gone = first.json()["data"]["id"].as_str().expect("id").to_owned();
        let d = server.request("DELETE", &format!("/v2/snapshots/{gone}"), key, None);
        assert!(d.status < 300, "{}", d.text());
        let again = snapshot();
        assert_eq!(
            again.status,
            201,
            "a delete frees the quota: {}",
            again.text()
        );
    }));
    server.destroy(key, &id);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The same quota, OpenRelay: a template build (it stores a snapshot) past it answers
/// 429 `QUOTA_EXCEEDED` and leaves no template nor builder sandbox.
#[test]
fn openrelay_template_build_past_the_snapshot_quota_answers_429() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = openrelay::Or::start(dir.path(), &[("SANDBOXD_WORKSPACE_QUOTA_SNAPSHOTS", "1")]);
    let templates = || {
        let list = or.get("/v1/sandbox-templates").json();
        list["templates"].as_array().map_or(0, Vec::len)
    };
    let built = or.post(
        "/v1/sandbox-templates",
        &json!({"name": "one", "run": ["echo one > /one"]}),
    );
    assert!(built.status < 300, "{}", built.text());
    let before = templates();
    let r = or.post(
        "/v1/sandbox-templates",
        &json!({"name": "two", "run": ["echo two > /two"]}),
    );
    assert_eq!(openrelay::code(&r, 429), "QUOTA_EXCEEDED");
    assert!(r.text().contains("1 snapshots"), "{}", r.text());
    assert_eq!(templates(), before, "a refused build made no template");
    assert!(or.active().is_empty(), "no builder sandbox left");
}
