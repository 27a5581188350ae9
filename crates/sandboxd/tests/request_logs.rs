//! Request ids, request log lines and the audit trail against a real `sandboxd serve`:
//! an id (echoed or generated) in the response header, in OpenRelay's error body and in
//! the request's one log line; `--log-format json`; no key in any log line; `sandboxd
//! audit` lists who did what to which sandbox.

mod exposition;
mod serve_bin;

use exposition::{Reaper, MASTER};
use serde_json::{json, Value};
use serve_bin::{cli, cli_status, http, Server};

fn auth(key: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {key}"))
}

/// The log line of the request with id `id`.
fn line_of(server: &Server, id: &str) -> String {
    server.wait_for_line(|l| l.contains("sandboxd::request") && l.contains(id))
}

#[test]
fn ids_in_headers_error_bodies_and_log_lines() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), Some(MASTER));

    // An id the client chose is echoed, put in OpenRelay's error body and logged.
    let headers = [auth(MASTER), ("x-request-id", "it-req-42".to_owned())];
    let reply = http(server.addr, "GET", "/v1/sandboxes/not-a-uuid", &headers, "");
    assert_eq!(reply.status, 404, "{}", reply.text());
    assert_eq!(reply.header("x-request-id"), Some("it-req-42"));
    assert_eq!(reply.json()["requestId"], "it-req-42");
    let line = line_of(&server, "it-req-42");
    for part in [
        "route=/v1/sandboxes/{sandbox_id}",
        "status=404",
        "method=\"GET\"",
        "workspace=default",
        "duration_ms=",
    ] {
        assert!(line.contains(part), "{part} not in {line}");
    }
    assert!(
        !line.contains("not-a-uuid"),
        "the path as sent is logged: {line}"
    );

    // Without one, or with one that is not sane, a fresh id (header = body = log).
    for sent in [None, Some("<script>"), Some(MASTER)] {
        let mut headers = vec![auth(MASTER)];
        if let Some(id) = sent {
            headers.push(("x-request-id", id.to_owned()));
        }
        let reply = http(
            server.addr,
            "DELETE",
            "/v1/sandboxes/00000000-0000-4000-8000-000000000000",
            &headers,
            "",
        );
        assert_eq!(reply.status, 404, "{}", reply.text());
        let id = reply
            .header("x-request-id")
            .expect("x-request-id")
            .to_owned();
        assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
        assert_eq!(reply.json()["requestId"], id.as_str());
        line_of(&server, &id);
    }

    // The other dialects carry it in the header (their error bodies have no field).
    let headers = [auth(MASTER), ("x-request-id", "it-inngest-1".to_owned())];
    let reply = http(
        server.addr,
        "GET",
        "/v2/sandboxes/00000000-0000-4000-8000-000000000000",
        &headers,
        "",
    );
    assert_eq!(reply.status, 404);
    assert_eq!(reply.header("x-request-id"), Some("it-inngest-1"));
    assert!(line_of(&server, "it-inngest-1").contains("route=/v2/sandboxes/{sandbox_id}"));
    // An unauthenticated request is logged without a workspace or key.
    let headers = [
        auth("or_wrong_key_0123456789abcdef"),
        ("x-request-id", "it-unauth-1".to_owned()),
    ];
    let reply = http(server.addr, "GET", "/v1/sandboxes", &headers, "");
    assert_eq!(reply.status, 401);
    let line = line_of(&server, "it-unauth-1");
    assert!(
        line.contains("workspace=-") && line.contains("key_id=-"),
        "{line}"
    );
}

#[test]
fn json_logs_and_no_key_in_any_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    // A second key, made beside the master key.
    let made = cli(
        &[
            "keys",
            "create",
            "--workspace",
            "team",
            "--prefix",
            "or_",
            "--data-dir",
            data,
        ],
        "",
    );
    let team_key = String::from_utf8(made.stdout).unwrap().trim().to_owned();
    assert!(team_key.len() >= 16, "{team_key}");
    let server =
        Server::start_with_env(dir.path(), Some(MASTER), &[("SANDBOXD_LOG_FORMAT", "json")]);
    let reaper = Reaper::new(&server);
    let wrong = "or_not_a_key_but_secret_0123456789";

    let id = reaper
        .keep(server.create_sandbox(MASTER, &json!({"name": "logs", "vcpu": 1, "memoryMb": 256})));
    let (code, _) = server.exec(MASTER, &id, &["/bin/sh", "-c", &format!("echo {MASTER}")]);
    assert_eq!(code, 0);
    for key in [MASTER, team_key.as_str(), wrong] {
        // The key in a query string, a body, a request id and a bad path too.
        let headers = [
            auth(key),
            ("x-request-id", key.to_owned()),
            ("content-type", "application/json".to_owned()),
        ];
        http(
            server.addr,
            "GET",
            &format!("/v2/sandboxes?key={key}"),
            &headers,
            "",
        );
        http(
            server.addr,
            "POST",
            "/v1/sandboxes",
            &headers,
            &json!({"template": key}).to_string(),
        );
        http(server.addr, "GET", &format!("/v1/{key}"), &headers, "");
        http(
            server.addr,
            "GET",
            "/v1/customer/tenants/x/sandboxes",
            &headers,
            "",
        );
    }
    server.destroy(MASTER, &id);
    let reply = server.request("GET", "/v2/sandboxes", &team_key, None);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let rid = reply.header("x-request-id").unwrap().to_owned();

    // Every request line is one JSON object with the fields the brief names.
    let line = line_of(&server, &rid);
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["route"], "/v2/sandboxes");
    assert_eq!(v["method"], "GET");
    assert_eq!(v["status"], 200);
    assert!(v["duration_ms"].as_f64().is_some(), "{v}");
    assert!(
        v["key_id"]
            .as_str()
            .is_some_and(|k| uuid::Uuid::parse_str(k).is_ok()),
        "{v}"
    );
    assert!(v["workspace"].as_str().is_some_and(|w| w != "-"), "{v}");
    drop(reaper);
    let log = server.log_lines();
    let requests = log
        .iter()
        .filter(|l| l.contains("sandboxd::request"))
        .count();
    assert!(requests >= 14, "{requests} request lines");
    for l in &log {
        assert!(serde_json::from_str::<Value>(l).is_ok(), "not JSON: {l}");
        for key in [MASTER, team_key.as_str(), wrong] {
            assert!(!l.contains(key), "a key in the log: {l}");
        }
    }
}

#[test]
fn the_audit_trail_lists_who_did_what() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let server = Server::start(dir.path(), Some(MASTER));
    let reaper = Reaper::new(&server);
    let headers = [
        auth(MASTER),
        ("x-request-id", "audit-create-1".to_owned()),
        ("content-type", "application/json".to_owned()),
    ];
    let body = json!({"name": "audited", "vcpu": 1, "memoryMb": 256}).to_string();
    let reply = http(server.addr, "POST", "/v2/sandboxes", &headers, &body);
    assert_eq!(reply.status, 201, "{}", reply.text());
    let id = reaper.keep(reply.json()["data"]["id"].as_str().unwrap().to_owned());
    for step in ["pause", "resume"] {
        let reply = server.request("POST", &format!("/v2/sandboxes/{id}/{step}"), MASTER, None);
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let reply = server.request(
        "POST",
        &format!("/v2/sandboxes/{id}/snapshots"),
        MASTER,
        Some(&json!({})),
    );
    assert!(reply.status < 300, "{}", reply.text());
    let snapshot = reply.json()["data"]["id"].as_str().unwrap().to_owned();
    // A refused pause of a missing sandbox changed nothing: not audited (a flood of such
    // requests would grow the trail, REVIEW13 #5).
    let missing = "00000000-0000-4000-8000-000000000000";
    assert_eq!(
        server
            .request(
                "POST",
                &format!("/v2/sandboxes/{missing}/pause"),
                MASTER,
                None
            )
            .status,
        404
    );
    server.destroy(MASTER, &id);

    let out = cli(
        &[
            "audit",
            "--workspace",
            "default",
            "--data-dir",
            data,
            "--json",
        ],
        "",
    );
    let entries: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "sandbox.create",
            "sandbox.pause",
            "sandbox.resume",
            "sandbox.snapshot",
            "sandbox.destroy"
        ]
    );
    assert_eq!(entries[0]["requestId"], "audit-create-1");
    let key = &entries[0]["keyId"];
    assert!(
        key.as_str()
            .is_some_and(|k| uuid::Uuid::parse_str(k).is_ok()),
        "{key}"
    );
    for e in &entries {
        assert_eq!(&e["keyId"], key, "{e}");
        assert_eq!(e["workspace"], "default");
        assert_eq!(e["target"], id.as_str(), "{e} (not {missing})");
        assert_eq!(e["outcome"], "ok", "{e}");
    }
    // --since: an age, a time after everything, and a malformed value.
    let recent = cli(
        &[
            "audit",
            "--workspace",
            "default",
            "--data-dir",
            data,
            "--since",
            "1h",
        ],
        "",
    );
    let table = String::from_utf8(recent.stdout).unwrap();
    assert!(table.starts_with("TIME"), "{table}");
    assert_eq!(table.lines().count(), 6, "{table}");
    let later = cli(
        &[
            "audit",
            "--workspace",
            "default",
            "--data-dir",
            data,
            "--since",
            "2999-01-01T00:00:00Z",
        ],
        "",
    );
    assert_eq!(String::from_utf8(later.stdout).unwrap().lines().count(), 1);
    let bad = cli_status(
        &[
            "audit",
            "--workspace",
            "default",
            "--data-dir",
            data,
            "--since",
            "soon",
        ],
        "",
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--since"));
    let other = cli_status(&["audit", "--workspace", "nobody", "--data-dir", data], "");
    assert!(!other.status.success());

    // Deleting the snapshot is audited too.
    let path = format!("/v2/snapshots/{snapshot}");
    let reply = server.request("DELETE", &path, MASTER, None);
    assert!(reply.status < 300, "{}", reply.text());
    let out = cli(
        &[
            "audit",
            "--workspace",
            "default",
            "--data-dir",
            data,
            "--json",
        ],
        "",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["action"], "snapshot.delete", "{text}");
    assert_eq!(last["target"], snapshot.as_str());
    assert_eq!(last["outcome"], "ok");
}

#[test]
fn template_builds_and_deletes_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let server = Server::start(dir.path(), Some(MASTER));
    let build = json!({"name": "audited-tpl", "from": "default", "run": ["true"]});
    let reply = server.request("POST", "/v1/sandbox-templates", MASTER, Some(&build));
    assert_eq!(reply.status, 201, "{}", reply.text());
    let reply = server.request("DELETE", "/v1/sandbox-templates/audited-tpl", MASTER, None);
    assert_eq!(reply.status, 200, "{}", reply.text());
    // A refused delete (a built-in template) is audited with its outcome.
    let reply = server.request("DELETE", "/v1/sandbox-templates/default", MASTER, None);
    assert_eq!(reply.status, 409, "{}", reply.text());

    let out = cli(
        &[
            "audit",
            "--workspace",
            "default",
            "--data-dir",
            data,
            "--json",
        ],
        "",
    );
    let entries: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &Value| {
            e["action"]
                .as_str()
                .is_some_and(|a| a.starts_with("template."))
        })
        .collect();
    let seen: Vec<(&str, &str, &str)> = entries
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["target"].as_str().unwrap(),
                e["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("template.build", "audited-tpl", "ok"),
            ("template.delete", "audited-tpl", "ok"),
            ("template.delete", "default", "wrong_state"),
        ],
        "{entries:?}"
    );
    for e in &entries {
        assert!(e["keyId"].as_str().is_some(), "no key in {e}");
        assert!(e["requestId"].as_str().is_some(), "no request id in {e}");
    }
}
