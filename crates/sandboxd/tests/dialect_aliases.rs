//! Dialect ids are aliases in their own dialect, not names the others share: a sandbox
//! an Inngest client names like a Runzivo id is no Runzivo sandbox; OpenRelay's own
//! attributes read back apart from the user's metadata.

mod serve_bin;

use serde_json::json;
use serve_bin::Server;

const MASTER: &str = "aliases-test-master-key";
const RUNZIVO: &str = "/v1/customer/tenants/default/sandboxes";

#[test]
fn a_name_that_looks_like_a_runzivo_id_is_not_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("SANDBOXD_NETWORK", "none")];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let lookalike = "sbx_0123456789abcdef01234567";
    let body = json!({"name": lookalike, "vcpu": 1, "memoryMb": 256});
    let inngest_id = server.create_sandbox(MASTER, &body);

    let got = server.request("GET", &format!("{RUNZIVO}/{lookalike}"), MASTER, None);
    assert_eq!(
        got.status,
        404,
        "Runzivo found an Inngest sandbox: {}",
        got.text()
    );
    let list = server.request("GET", RUNZIVO, MASTER, None).json();
    assert_eq!(list["data"], json!([]), "{list}");

    // A Runzivo sandbox is found by its id, and its id is no name in Inngest.
    let created = server.request("POST", RUNZIVO, MASTER, Some(&json!({})));
    assert_eq!(created.status, 201, "{}", created.text());
    let runzivo_id = created.json()["id"].as_str().expect("id").to_owned();
    let path = format!("{RUNZIVO}/{runzivo_id}");
    assert_eq!(server.request("GET", &path, MASTER, None).status, 200);
    let list = server.request("GET", RUNZIVO, MASTER, None).json();
    assert_eq!(list["data"][0]["id"], json!(runzivo_id), "{list}");
    assert_eq!(list["data"].as_array().map(Vec::len), Some(1), "{list}");

    server.destroy(MASTER, &inngest_id);
    assert_eq!(
        server.request("DELETE", &path, MASTER, None).status / 100,
        2
    );
}

#[test]
fn openrelay_attributes_are_not_metadata() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("SANDBOXD_NETWORK", "none")];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let body = json!({"template": "default", "ephemeral": true, "autoPause": true,
        "metadata": {"team": "x"}});
    let created = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
    assert_eq!(created.status / 100, 2, "{}", created.text());
    let v = created.json();
    let id = v["id"].as_str().expect("id").to_owned();
    assert_eq!(
        (&v["ephemeral"], &v["autoPause"]),
        (&json!(true), &json!(true)),
        "{v}"
    );
    assert_eq!(v["metadata"], json!({"team": "x"}), "{v}");

    // Read back from the store: the attributes come from the dialect's typed record.
    let got = server
        .request("GET", &format!("/v1/sandboxes/{id}"), MASTER, None)
        .json();
    assert_eq!(
        (&got["ephemeral"], &got["autoPause"]),
        (&json!(true), &json!(true)),
        "{got}"
    );
    assert_eq!(got["metadata"], json!({"team": "x"}), "{got}");

    let del = server.request("DELETE", &format!("/v1/sandboxes/{id}"), MASTER, None);
    assert_eq!(del.status / 100, 2, "{}", del.text());
}
