//! What the Schemathesis runs against docs/openapi/*.json found, each pinned through the
//! real server: every answer is one of the statuses the route documents, in its shape.

mod serve_bin;

use serve_bin::Server;

const MASTER: &str = "openapi-findings-master-key";

#[test]
fn deleting_a_template_that_does_not_exist_is_a_404() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), Some(MASTER));
    let r = server.request("DELETE", "/v1/sandbox-templates/N", MASTER, None);
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["code"], "NOT_FOUND", "{}", r.text());
}

#[test]
fn a_create_past_its_workspace_quota_is_a_429_even_when_the_server_is_full_too() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [
        ("SANDBOXD_WORKSPACE_QUOTA_VCPU", "2"),
        ("SANDBOXD_MAX_VCPU_TOTAL", "3"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let one = serde_json::json!({"name": "one", "vcpu": 2, "memoryMb": 256});
    let id = server.create_sandbox(MASTER, &one);
    // Both the workspace's quota (2 + 2 > 2) and the server (2 + 2 > 3) refuse it: the
    // workspace's own limit is what stands in the way, so it is no temporary shortage.
    let two = serde_json::json!({"name": "two", "vcpu": 2, "memoryMb": 256});
    let inngest = server.request("POST", "/v2/sandboxes", MASTER, Some(&two));
    let runzivo = server.request(
        "POST",
        "/v1/customer/tenants/default/sandboxes",
        MASTER,
        Some(&serde_json::json!({"vcpu": 2})),
    );
    server.destroy(MASTER, &id);
    assert_eq!(inngest.status, 429, "{}", inngest.text());
    assert_eq!(runzivo.status, 429, "{}", runzivo.text());
}
