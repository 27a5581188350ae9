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
