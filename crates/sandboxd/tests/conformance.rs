//! Spec gaps an audit found, each through the real server: a method a route does not
//! take is a 405 in the dialect's shape, a create that can never fit is the client's
//! error (400) while a full server is a 503 with `Retry-After`, and Runzivo's list pages
//! its own sandboxes only, with no cursor after the last one. A path that does not
//! decode to UTF-8 is a 400 in its dialect's shape (it was plain text).

mod serve_bin;

use serde_json::{json, Value};
use serve_bin::Server;

const MASTER: &str = "conformance-test-master-key";
const RUNZIVO: &str = "/v1/customer/tenants/default/sandboxes";

#[test]
fn a_method_a_route_does_not_take_is_a_405_in_its_dialect() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), Some(MASTER));
    let inngest = server.request("PATCH", "/v2/sandboxes", MASTER, None);
    assert_eq!(inngest.status, 405);
    assert_eq!(
        inngest.json()["errors"][0]["code"],
        "method_not_allowed",
        "{}",
        inngest.text()
    );
    let openrelay = server.request("PUT", "/v1/sandboxes", MASTER, None);
    assert_eq!(openrelay.status, 405);
    assert_eq!(
        openrelay.json()["code"],
        "METHOD_NOT_ALLOWED",
        "{}",
        openrelay.text()
    );
    assert!(openrelay.json()["requestId"].is_string());
    let runzivo = server.request("PATCH", RUNZIVO, MASTER, None);
    assert_eq!(runzivo.status, 405);
    assert_eq!(
        runzivo.json()["error"]["code"],
        "method_not_allowed",
        "{}",
        runzivo.text()
    );
}

#[test]
fn a_create_that_can_never_fit_is_a_400_and_a_full_server_a_503_with_retry_after() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [
        ("SANDBOXD_MAX_SANDBOXES", "1"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let huge = json!({"name": "huge-cpu", "vcpu": 4294967295u32, "memoryMb": 512});
    let r = server.request("POST", "/v2/sandboxes", MASTER, Some(&huge));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("never fit"), "{}", r.text());
    let huge = json!({"name": "huge-mem", "vcpu": 1, "memoryMb": 4294967295u32});
    let r = server.request("POST", "/v2/sandboxes", MASTER, Some(&huge));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("never fit"), "{}", r.text());

    let id = server.create_sandbox(MASTER, &json!({"name": "one", "vcpu": 1, "memoryMb": 256}));
    let second = json!({"name": "two", "vcpu": 1, "memoryMb": 256});
    let r = server.request("POST", "/v2/sandboxes", MASTER, Some(&second));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        r.header("retry-after").is_some(),
        "Inngest 503 without Retry-After"
    );
    let body = json!({"template": "default", "waitSeconds": 0});
    let r = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (503, json!("CAPACITY_EXHAUSTED"))
    );
    assert!(
        r.header("retry-after").is_some(),
        "OpenRelay 503 without Retry-After"
    );
    server.destroy(MASTER, &id);
}

#[test]
fn runzivo_pages_only_its_own_sandboxes_and_ends_without_a_cursor() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("SANDBOXD_NETWORK", "none")];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let created = server.request("POST", RUNZIVO, MASTER, Some(&json!({})));
    assert_eq!(created.status, 201, "{}", created.text());
    let runzivo_id = created.json()["id"].as_str().expect("id").to_owned();
    // Two newer sandboxes of the same workspace, made through Inngest.
    let others: Vec<String> = (0..2)
        .map(|i| {
            let body = json!({"name": format!("inngest-{i}"), "vcpu": 1, "memoryMb": 256});
            server.create_sandbox(MASTER, &body)
        })
        .collect();

    let page = server
        .request("GET", &format!("{RUNZIVO}?limit=1"), MASTER, None)
        .json();
    let ids: Vec<&Value> = page["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|s| &s["id"])
        .collect();
    assert_eq!(ids, [&json!(runzivo_id)], "{page}");
    assert!(
        page["next_cursor"].is_null(),
        "a cursor after the last page: {page}"
    );

    for id in &others {
        server.destroy(MASTER, id);
    }
    let path = format!("{RUNZIVO}/{runzivo_id}");
    assert_eq!(
        server.request("DELETE", &path, MASTER, None).status / 100,
        2
    );
}

#[test]
fn runzivo_errors_speak_of_its_own_ids_and_states() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("SANDBOXD_NETWORK", "none")];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let created = server.request("POST", RUNZIVO, MASTER, Some(&json!({})));
    assert_eq!(created.status, 201, "{}", created.text());
    let id = created.json()["id"].as_str().expect("id").to_owned();
    let path = format!("{RUNZIVO}/{id}");
    assert_eq!(
        server.request("DELETE", &path, MASTER, None).status / 100,
        2
    );

    let exec = json!({"cmd": "true"});
    let r = server.request("POST", &format!("{path}/exec"), MASTER, Some(&exec));
    assert_eq!(r.status, 409, "{}", r.text());
    let message = r.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("deleted"), "{message}");
    let engine_words = ["TERMINATED", "RUNNING", "TERMINATING"];
    assert!(
        !engine_words.iter().any(|w| message.contains(w)),
        "{message}"
    );
    // No engine UUID (8-4-4-4-12 hex) either.
    let uuid_like = message
        .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .any(|w| w.len() == 36 && w.matches('-').count() == 4);
    assert!(!uuid_like, "{message}");
}

#[test]
fn openrelay_shows_no_expiry_for_a_sandbox_that_has_none() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("SANDBOXD_NETWORK", "none")];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    // Inngest sandboxes have no timeout.
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "no-timeout", "vcpu": 1, "memoryMb": 256}),
    );
    let listed = server.request("GET", "/v1/sandboxes", MASTER, None).json();
    let item = listed["sandboxes"]
        .as_array()
        .and_then(|items| items.iter().find(|s| s["id"] == json!(id)))
        .unwrap_or_else(|| panic!("{id} not in {listed}"))
        .clone();
    assert!(item["createdAt"].is_string(), "{item}");
    assert!(
        item.get("expiresAt").is_none(),
        "an invented expiry: {item}"
    );
    let got = server
        .request("GET", &format!("/v1/sandboxes/{id}"), MASTER, None)
        .json();
    assert!(got.get("expiresAt").is_none(), "{got}");
    server.destroy(MASTER, &id);
}

#[test]
fn the_openrelay_pages_own_python_example_prints_42() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("SANDBOXD_NETWORK", "none")];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let body = json!({"template": "python", "run": {"cmd": "python -c 'print(6*7)'"}});
    let r = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    assert_eq!(v["result"]["exitCode"], 0, "{v}");
    assert_eq!(v["result"]["stdout"], "42\n", "{v}");
    let id = v["id"].as_str().expect("id");
    let gone = server.request("DELETE", &format!("/v1/sandboxes/{id}"), MASTER, None);
    assert_eq!(gone.status / 100, 2, "{}", gone.text());
}

#[test]
fn an_openrelay_run_cut_by_the_sandboxs_timeout_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("SANDBOXD_NETWORK", "none")];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let body = json!({"template": "default", "timeoutSeconds": 1, "run": {"cmd": "echo started; sleep 60"}});
    let r = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    assert_eq!(v["result"]["stdout"], "started\n", "{v}");
    assert_eq!(v["result"]["error"]["code"], "TIMEOUT", "{v}");
    let message = v["result"]["error"]["error"].as_str().unwrap_or_default();
    assert!(message.contains("timeoutSeconds"), "{v}");
}

#[test]
fn a_path_that_does_not_decode_to_utf8_is_a_400_in_its_dialect() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), Some(MASTER));
    let inngest = server.request("GET", "/v2/sandboxes/%ff", MASTER, None);
    assert_eq!(inngest.status, 400, "{}", inngest.text());
    assert!(
        inngest.json()["errors"][0]["code"].is_string(),
        "{}",
        inngest.text()
    );
    let openrelay = server.request("GET", "/v1/sandboxes/%ff%fe", MASTER, None);
    assert_eq!(openrelay.status, 400, "{}", openrelay.text());
    assert_eq!(
        openrelay.json()["code"],
        "INVALID_REQUEST",
        "{}",
        openrelay.text()
    );
    let runzivo = server.request("GET", &format!("{RUNZIVO}/%c3%28"), MASTER, None);
    assert_eq!(runzivo.status, 400, "{}", runzivo.text());
    assert!(
        runzivo.json()["error"]["code"].is_string(),
        "{}",
        runzivo.text()
    );
    let console = server.request("GET", "/console/api/sandboxes/%ff", MASTER, None);
    assert_eq!(console.status, 400, "{}", console.text());
    assert!(
        console.json()["error"]["code"].is_string(),
        "{}",
        console.text()
    );
    // Encoded UTF-8 still routes: an unknown sandbox named in it is a 404.
    let named = server.request("GET", "/v1/sandboxes/%C3%A9t%C3%A9", MASTER, None);
    assert_eq!(named.status, 404, "{}", named.text());
}
