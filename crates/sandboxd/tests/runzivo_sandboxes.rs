//! Runzivo dialect against a real `sandboxd serve`: tenant routes, IDs, `/workspace`,
//! authentication, tenant membership, permissions and scopes, their error codes, and disk sizes.

mod runzivo_api;

use runzivo_api::{Server, OTHER_TENANT};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn create_get_list_delete() {
    let s = Server::start(30);
    let id = s.create().await;
    assert!(id.starts_with("sbx_") && id.len() == 28, "{id}");
    assert!(id[4..]
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    let got = s
        .call(
            "GET",
            &s.path(&format!("/{id}")),
            Some(&s.keys.reader),
            None,
            "",
        )
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.headers["cache-control"], "no-store");
    let v = got.json();
    assert_eq!(
        (v["id"].as_str(), v["status"].as_str()),
        (Some(id.as_str()), Some("running"))
    );
    assert_eq!(v["tenant_id"], runzivo_api::TENANT);
    let list = s
        .call("GET", &s.path(""), Some(&s.keys.reader), None, "")
        .await
        .json();
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["id"].as_str())
        .collect();
    assert_eq!(ids, vec![id.as_str()]);
    assert_eq!(list["next_cursor"], serde_json::Value::Null);
    let other = Server::path(&s, "?limit=0");
    s.call("GET", &other, Some(&s.keys.reader), None, "")
        .await
        .expect(400, "invalid_request");

    // /workspace exists, is the default cwd and is writable.
    let out = s
        .sh(
            &id,
            "pwd; echo hi > /workspace/f && cat f && test -w /workspace && echo ok",
        )
        .await;
    assert_eq!(out, "/workspace\nhi\nok\n");

    let gone = s
        .call(
            "DELETE",
            &s.path(&format!("/{id}")),
            Some(&s.keys.writer),
            None,
            "",
        )
        .await;
    assert_eq!(
        (gone.status, gone.json()["status"].as_str()),
        (200, Some("deleted"))
    );
    let after = s
        .call(
            "GET",
            &s.path(&format!("/{id}")),
            Some(&s.keys.reader),
            None,
            "",
        )
        .await;
    assert_eq!(after.json()["status"], "deleted");
    let exec = s
        .json(
            "POST",
            &s.path(&format!("/{id}/exec")),
            &json!({"cmd":"true"}),
        )
        .await;
    exec.expect(409, "sandbox_wrong_state");
}

#[tokio::test(flavor = "multi_thread")]
async fn auth_membership_permissions_and_scopes() {
    let s = Server::start(30);
    let id = s.create().await;
    let get = s.path(&format!("/{id}"));
    let exec = s.path(&format!("/{id}/exec"));
    let body = json!({"cmd":"echo ok"}).to_string();
    let ct = Some("application/json");
    let k = &s.keys;

    s.call("GET", &get, None, None, "")
        .await
        .expect(401, "unauthorized");
    s.call("GET", &get, Some("nope"), None, "")
        .await
        .expect(401, "unauthorized");
    let other = format!("/v1/customer/tenants/{OTHER_TENANT}/sandboxes/{id}");
    s.call("GET", &other, Some(&k.writer), None, "")
        .await
        .expect(403, "tenant_membership_required");
    let nowhere = format!("/v1/customer/tenants/t_nowhere/sandboxes/{id}");
    s.call("GET", &nowhere, Some(&k.writer), None, "")
        .await
        .expect(403, "tenant_membership_required");
    s.call("GET", &get, Some(&k.other_tenant), None, "")
        .await
        .expect(403, "tenant_membership_required");
    // The other tenant's key sees its own tenant, where this sandbox does not exist.
    s.call("GET", &other, Some(&k.other_tenant), None, "")
        .await
        .expect(404, "sandbox_not_found");

    s.call("GET", &get, Some(&k.none), None, "")
        .await
        .expect(403, "permission_required");
    assert_eq!(
        s.call("GET", &get, Some(&k.reader), None, "").await.status,
        200
    );
    s.call("POST", &exec, Some(&k.reader), ct, body.clone())
        .await
        .expect(403, "permission_required");
    s.call("DELETE", &get, Some(&k.reader), None, "")
        .await
        .expect(403, "permission_required");
    s.call("POST", &s.path(""), Some(&k.reader), None, "")
        .await
        .expect(403, "permission_required");
    let ok = s
        .call("POST", &exec, Some(&k.all_scope), ct, body.clone())
        .await;
    assert_eq!(runzivo_api::collect(&ok.lines()).1["exit_code"], 0);
    s.call("POST", &exec, Some(&k.all_scope_reader), ct, body.clone())
        .await
        .expect(403, "permission_required");
    assert_eq!(
        s.call("GET", &get, Some(&k.all_scope_reader), None, "")
            .await
            .status,
        200
    );
    s.call("POST", &exec, Some(&k.other_scope), ct, body.clone())
        .await
        .expect(403, "api_key_scope_required");
    // The master key belongs to the default workspace (tenant `default`) only.
    let master = s
        .call("POST", &exec, Some(runzivo_api::MASTER), ct, body.clone())
        .await;
    master.expect(403, "tenant_membership_required");

    let missing = s.path("/sbx_000000000000000000000000");
    s.call("GET", &missing, Some(&k.reader), None, "")
        .await
        .expect(404, "sandbox_not_found");
    let exec_missing = s.path("/sbx_000000000000000000000000/exec");
    s.call("POST", &exec_missing, Some(&k.writer), ct, body.clone())
        .await
        .expect(404, "sandbox_not_found");
    for bad in [
        "/sbx_123",
        "/SBX_000000000000000000000000",
        "/sbx_00000000000000000000000g",
        "/123e4567-e89b-12d3-a456-426614174000",
    ] {
        s.call("GET", &s.path(bad), Some(&k.reader), None, "")
            .await
            .expect(400, "invalid_request");
    }
    let create_bad = s
        .call("POST", &s.path(""), Some(&k.writer), ct, r#"{"nope":1}"#)
        .await;
    create_bad.expect(400, "invalid_request");
    let list = s
        .call("GET", &s.path(""), Some(&k.reader), None, "")
        .await
        .json();
    assert_eq!(
        list["data"].as_array().map(Vec::len),
        Some(1),
        "nothing else was created"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unavailable_capacity_and_a_dead_agent_answer_503() {
    let s = Server::start_with_env(30, &[("SANDBOXD_MAX_SANDBOXES", "1")]);
    let id = s.create().await;
    s.call("POST", &s.path(""), Some(&s.keys.writer), None, "")
        .await
        .expect(503, "sandboxes_unavailable");

    // Kill the sandbox's agent (PID 1 inside) behind the server's back.
    let sandboxes = s.data_dir().join("sandboxes");
    let handle = std::fs::read_dir(&sandboxes)
        .expect("sandboxes dir")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("handle.json")).ok())
        .next()
        .expect("a handle.json");
    let handle: serde_json::Value = serde_json::from_str(&handle).expect("handle");
    let pid = handle["agent_pid"].as_i64().expect("agent_pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the agent");
    for _ in 0..200 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z"))
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let reply = s
        .json(
            "POST",
            &s.path(&format!("/{id}/exec")),
            &json!({"cmd": "true"}),
        )
        .await;
    // The engine watches every agent: once it has seen this one die, the sandbox has
    // ended (409, stopped); an exec that races that notice finds the agent gone (503).
    let code = reply.json()["error"]["code"].as_str().map(str::to_owned);
    match reply.status {
        409 => assert_eq!(code.as_deref(), Some("sandbox_wrong_state")),
        _ => reply.expect(503, "sandbox_exec_unavailable"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_may_ask_for_a_disk_within_the_maximum() {
    let s = Server::start_with_env(30, &[("SANDBOXD_MAX_DISK_MB_PER_SANDBOX", "10240")]);
    let small = s.create_with(&json!({"disk_mb": 64})).await;
    assert_eq!(small["disk_mb"], 64, "{small}");
    let id = small["id"].as_str().expect("id");
    let out = s
        .sh(
            id,
            "dd if=/dev/zero of=/fill bs=1M count=100 2>&1; echo exit=$?",
        )
        .await;
    assert!(
        out.contains("No space left on device") && out.contains("exit=1"),
        "{out}"
    );
    let plain = s.create_with(&json!({})).await;
    assert_eq!(plain["disk_mb"], 10240, "the server's default");
    for disk in [10241, 0] {
        s.json("POST", &s.path(""), &json!({"disk_mb": disk}))
            .await
            .expect(400, "invalid_request");
    }
}
