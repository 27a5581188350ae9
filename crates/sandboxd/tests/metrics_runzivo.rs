//! The usage route of the Runzivo dialect: a tenant's sandbox's usage in snake_case,
//! and its error codes for a malformed, a missing and a foreign sandbox.

mod runzivo_api;

use runzivo_api::{Server, OTHER_TENANT};

#[tokio::test(flavor = "multi_thread")]
async fn usage_of_a_tenants_sandbox() {
    let s = Server::start(30);
    let id = s.create().await;
    let got = s
        .call(
            "GET",
            &s.path(&format!("/{id}/metrics")),
            Some(&s.keys.reader),
            None,
            "",
        )
        .await;
    assert_eq!(got.status, 200, "{:?}", got.json());
    let v = got.json();
    assert!(
        v["cpu_seconds"].is_number() && v["memory_bytes"].as_u64().unwrap() > 0,
        "{v}"
    );
    assert!(
        v["pids"].as_u64().unwrap() >= 1 && v["disk_used_bytes"].is_u64(),
        "{v}"
    );
    let malformed = s
        .call(
            "GET",
            &s.path("/not-an-id/metrics"),
            Some(&s.keys.reader),
            None,
            "",
        )
        .await;
    malformed.expect(400, "invalid_request");
    let missing = s
        .call(
            "GET",
            &s.path("/sbx_000000000000000000000000/metrics"),
            Some(&s.keys.reader),
            None,
            "",
        )
        .await;
    missing.expect(404, "sandbox_not_found");
    let foreign = format!("/v1/customer/tenants/{OTHER_TENANT}/sandboxes/{id}/metrics");
    let refused = s
        .call("GET", &foreign, Some(&s.keys.reader), None, "")
        .await;
    refused.expect(403, "tenant_membership_required");
    let deleted = s
        .call(
            "DELETE",
            &s.path(&format!("/{id}")),
            Some(&s.keys.writer),
            None,
            "",
        )
        .await;
    assert_eq!(deleted.status, 200);
}
