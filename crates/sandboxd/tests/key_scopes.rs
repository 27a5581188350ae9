//! A key means the same in every dialect: one whose legacy scopes lack `all:all` (as
//! `sandboxd keys create --scope billing:read` makes) and a read-only key are refused
//! create, exec and delete by Runzivo, Inngest and OpenRelay alike, each in its own 403
//! shape, while an all-access key works in all three. Also: a path under each dialect's
//! prefix that names no route answers 404 in that dialect's shape.

mod runzivo_api;

use runzivo_api::{Reply, Server, TENANT};
use sandboxd_engine::accounts::Accounts;
use serde_json::{json, Value};

/// Keys of the test tenant's workspace, made beside the running server.
struct Keys {
    /// `*` without scopes: what `keys create` makes by default.
    full: String,
    /// `*` with the `all:all` scope.
    all_scope: String,
    /// `*` with a scope other than `all:all`.
    billing: String,
    /// Runzivo's read permission only.
    reader: String,
    /// OpenRelay's read permission only.
    or_reader: String,
}

fn keys(s: &Server) -> Keys {
    let store = sandboxd_store::SqliteStore::open(s.data_dir().join("sandboxd.db")).expect("store");
    let accounts = Accounts::new(&store);
    let ws = accounts
        .workspace_by_alias("runzivo", TENANT)
        .expect("lookup")
        .expect("the test tenant's workspace");
    let key = |perms: &[&str], scopes: &[&str]| {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        accounts
            .create_key(Some(&ws.id), v(perms), v(scopes))
            .expect("key")
    };
    Keys {
        full: key(&["*"], &[]),
        all_scope: key(&["*"], &["all:all"]),
        billing: key(&["*"], &["billing:read"]),
        reader: key(&["sandboxes:read"], &[]),
        or_reader: key(&["sandboxes.read"], &[]),
    }
}

const JSON: Option<&str> = Some("application/json");

/// Runzivo's 403: `{"error":{"code","message"}}`.
fn runzivo_403(reply: &Reply, code: &str, what: &str) {
    assert_eq!(reply.status, 403, "{what}: {}", reply.json());
    assert_eq!(
        reply.json()["error"]["code"],
        code,
        "{what}: {}",
        reply.json()
    );
}

/// Inngest's 403: `{"errors":[{"code":"access_denied","message"}]}`.
fn inngest_403(reply: &Reply, what: &str) {
    let body = reply.json();
    assert_eq!(reply.status, 403, "{what}: {body}");
    assert_eq!(body["errors"][0]["code"], "access_denied", "{what}: {body}");
    assert!(body["errors"][0]["message"].is_string(), "{what}: {body}");
}

/// OpenRelay's 403: `{"error","code":"PERMISSION_DENIED","permission","requestId"}`.
fn openrelay_403(reply: &Reply, what: &str) {
    let body = reply.json();
    assert_eq!(reply.status, 403, "{what}: {body}");
    assert_eq!(body["code"], "PERMISSION_DENIED", "{what}: {body}");
    assert!(body["error"].is_string(), "{what}: {body}");
    assert!(body["requestId"].is_string(), "{what}: {body}");
}

/// The engine id (Inngest's and OpenRelay's) of the workspace's one sandbox (Inngest
/// shows the engine name, Runzivo's `sbx_` ID, as the id).
async fn engine_id(s: &Server, key: &str) -> String {
    let list = s.call("GET", "/v2/sandboxes", Some(key), None, "").await;
    assert_eq!(list.status, 200, "{}", list.json());
    let list = list.json();
    match list["data"].as_array().map(Vec::as_slice) {
        Some([one]) => one["id"].as_str().expect("id").to_owned(),
        _ => panic!("not one sandbox: {list}"),
    }
}

/// A create through `path` with `key`; whatever it makes is deleted again at once (with
/// the all-access `full` key) so a failing assertion leaks no sandbox.
async fn create_then_delete(s: &Server, full: &str, path: &str, key: &str, body: &str) -> Reply {
    let reply = s.call("POST", path, Some(key), JSON, body.to_owned()).await;
    let v = reply.json();
    let made = [&v["id"], &v["data"]["id"], &v["sandbox"]["id"]]
        .into_iter()
        .find_map(|id| id.as_str());
    if let (true, Some(made)) = (reply.status < 300, made) {
        let gone = s
            .call("DELETE", &format!("{path}/{made}"), Some(full), None, "")
            .await;
        assert!(gone.status < 300, "delete {path}/{made}: {}", gone.json());
    }
    reply
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scoped_or_read_only_key_is_refused_changes_in_every_dialect() {
    let s = Server::start(30);
    let k = keys(&s);
    let sbx = s.create().await;
    let id = engine_id(&s, &k.full).await;
    let rz = |rest: &str| s.path(rest);
    let inngest_create = json!({"name": "scoped", "vcpu": 1, "memoryMb": 256}).to_string();
    let inngest_exec = json!({"command": ["/usr/bin/id", "-u"]}).to_string();
    let cmd = json!({"cmd": "id -u"}).to_string();

    for (key, what) in [(&k.billing, "billing:read"), (&k.reader, "sandboxes:read")] {
        let code = match what {
            "billing:read" => "api_key_scope_required",
            _ => "permission_required",
        };
        let r = create_then_delete(&s, &k.full, &rz(""), key, "{}").await;
        runzivo_403(&r, code, &format!("{what}: runzivo create"));
        let r = s
            .call(
                "POST",
                &rz(&format!("/{sbx}/exec")),
                Some(key),
                JSON,
                cmd.clone(),
            )
            .await;
        runzivo_403(&r, code, &format!("{what}: runzivo exec"));
        let r = s
            .call("DELETE", &rz(&format!("/{sbx}")), Some(key), None, "")
            .await;
        runzivo_403(&r, code, &format!("{what}: runzivo delete"));

        let r = create_then_delete(&s, &k.full, "/v2/sandboxes", key, &inngest_create).await;
        inngest_403(&r, &format!("{what}: inngest create"));
        let exec = format!("/v2/sandboxes/{id}/exec");
        let r = s
            .call("POST", &exec, Some(key), JSON, inngest_exec.clone())
            .await;
        inngest_403(&r, &format!("{what}: inngest exec"));
        let r = s
            .call(
                "DELETE",
                &format!("/v2/sandboxes/{id}"),
                Some(key),
                None,
                "",
            )
            .await;
        inngest_403(&r, &format!("{what}: inngest delete"));

        let body = json!({"template": "default"}).to_string();
        let r = create_then_delete(&s, &k.full, "/v1/sandboxes", key, &body).await;
        openrelay_403(&r, &format!("{what}: openrelay create"));
        let exec = format!("/v1/sandboxes/{id}/exec");
        let r = s.call("POST", &exec, Some(key), JSON, cmd.clone()).await;
        openrelay_403(&r, &format!("{what}: openrelay exec"));
        let r = s
            .call(
                "DELETE",
                &format!("/v1/sandboxes/{id}"),
                Some(key),
                None,
                "",
            )
            .await;
        openrelay_403(&r, &format!("{what}: openrelay delete"));
    }
    // The scoped key reads nothing either (Runzivo's rule, now everyone's).
    let r = s
        .call("GET", &rz(&format!("/{sbx}")), Some(&k.billing), None, "")
        .await;
    runzivo_403(&r, "api_key_scope_required", "billing:read: runzivo get");
    let r = s
        .call("GET", "/v2/sandboxes", Some(&k.billing), None, "")
        .await;
    inngest_403(&r, "billing:read: inngest list");
    let r = s
        .call("GET", "/v1/sandboxes", Some(&k.billing), None, "")
        .await;
    openrelay_403(&r, "billing:read: openrelay list");
    // A read-only key still reads where its permission is spelled.
    let r = s
        .call("GET", &rz(&format!("/{sbx}")), Some(&k.reader), None, "")
        .await;
    assert_eq!(r.status, 200, "sandboxes:read: runzivo get");
    let r = s
        .call(
            "GET",
            &format!("/v1/sandboxes/{id}"),
            Some(&k.or_reader),
            None,
            "",
        )
        .await;
    assert_eq!(r.status, 200, "sandboxes.read: openrelay get");
    let exec = format!("/v1/sandboxes/{id}/exec");
    let r = s
        .call("POST", &exec, Some(&k.or_reader), JSON, cmd.clone())
        .await;
    openrelay_403(&r, "sandboxes.read: openrelay exec");

    // An all-access key, with or without `all:all`, works in all three.
    for key in [&k.full, &k.all_scope] {
        let r = s
            .call(
                "POST",
                &rz(&format!("/{sbx}/exec")),
                Some(key),
                JSON,
                cmd.clone(),
            )
            .await;
        let (_, end) = runzivo_api::collect(&r.lines());
        assert_eq!(end["exit_code"], 0, "runzivo exec: {end}");
        let exec = format!("/v2/sandboxes/{id}/exec");
        let r = s
            .call("POST", &exec, Some(key), JSON, inngest_exec.clone())
            .await;
        assert_eq!(r.status, 200, "inngest exec: {:?}", r.body);
        let r = s
            .call(
                "POST",
                &format!("/v1/sandboxes/{id}/exec"),
                Some(key),
                JSON,
                cmd.clone(),
            )
            .await;
        assert_eq!(r.status, 200, "openrelay exec: {}", r.json());
        assert_eq!(r.json()["exitCode"], 0, "openrelay exec: {}", r.json());
    }
    // Create (and delete) through each dialect.
    let made = create_then_delete(&s, &k.full, &rz(""), &k.full, "{}").await;
    assert_eq!(made.status, 201, "runzivo create: {}", made.json());
    let made = create_then_delete(&s, &k.full, "/v2/sandboxes", &k.all_scope, &inngest_create);
    let made = made.await;
    assert_eq!(made.status, 201, "inngest create: {}", made.json());
    let body = json!({"template": "default"}).to_string();
    let made = create_then_delete(&s, &k.full, "/v1/sandboxes", &k.full, &body).await;
    assert_eq!(made.status, 201, "openrelay create: {}", made.json());
    // The Runzivo sandbox is deleted through OpenRelay.
    let r = s
        .call(
            "DELETE",
            &format!("/v1/sandboxes/{id}"),
            Some(&k.full),
            None,
            "",
        )
        .await;
    let status = r.status;
    assert!((200..=204).contains(&status), "openrelay delete: {status}");
}

/// One unmatched request: its 404 body and its `X-Request-Id` (the request went through
/// the server's request log like any other).
async fn not_found(s: &Server, method: &str, path: &str) -> (Value, String) {
    let r = s
        .call(method, path, Some(runzivo_api::MASTER), None, "")
        .await;
    assert_eq!(r.status, 404, "{method} {path}: {:?}", r.body);
    let header = |name: &str| {
        let value = r.headers.get(name).and_then(|v| v.to_str().ok());
        value.map(str::to_owned)
    };
    assert_eq!(
        header("cache-control").as_deref(),
        Some("no-store"),
        "{method} {path}"
    );
    let id = header("x-request-id").unwrap_or_else(|| panic!("{method} {path}: no request id"));
    (r.json(), id)
}

#[tokio::test(flavor = "multi_thread")]
async fn unmatched_routes_answer_in_their_prefix_dialect_shape() {
    let s = Server::start(30);
    let runzivo = [
        ("GET", format!("/v1/customer/tenants/{TENANT}/nope")),
        (
            "GET",
            format!("/v1/customer/tenants/{TENANT}/sandboxes/sbx_0/files"),
        ),
        (
            "POST",
            format!("/v1/customer/tenants/{TENANT}/sandboxes/sbx_0/nope"),
        ),
        ("GET", "/v1/customer/".to_owned()),
    ];
    for (method, path) in &runzivo {
        let (body, _) = not_found(&s, method, path).await;
        assert_eq!(
            body["error"]["code"], "not_found",
            "{method} {path}: {body}"
        );
        assert!(
            body["error"]["message"].is_string(),
            "{method} {path}: {body}"
        );
    }
    let openrelay = [
        ("GET", "/v1/nope"),
        ("DELETE", "/v1/sandboxes/x/nope"),
        ("GET", "/v1/sandbox-templates/t/files"),
        ("GET", "/v1/"),
    ];
    for (method, path) in openrelay {
        let (body, id) = not_found(&s, method, path).await;
        assert_eq!(body["code"], "NOT_FOUND", "{method} {path}: {body}");
        assert!(body["error"].is_string(), "{method} {path}: {body}");
        assert_eq!(body["requestId"], id, "{method} {path}: {body}");
    }
    for (method, path) in [
        ("GET", "/v2/nope"),
        ("POST", "/v2/sandboxes/x/y/z"),
        ("GET", "/nope"),
    ] {
        let (body, _) = not_found(&s, method, path).await;
        assert_eq!(
            body["errors"][0]["code"], "not_found",
            "{method} {path}: {body}"
        );
    }
}
