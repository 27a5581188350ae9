//! `sandboxd keys` and `sandboxd secrets` on a data directory, used beside a running
//! `sandboxd serve`: created keys authenticate, revoked keys stop, secrets reach
//! sandboxes, and the store never holds a key or a secret in clear.

mod serve_bin;

use sandboxd_dialect_inngest::signing_key::sdk_bearer_for;
use serde_json::json;
use serve_bin::{cli_status, Server};
use std::process::Output;

/// `sandboxd ARGS… --data-dir DATA`, which must succeed; returns its trimmed stdout.
fn ok(data: &str, args: &[&str], stdin: &str) -> String {
    let out = run(data, args, stdin);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn run(data: &str, args: &[&str], stdin: &str) -> Output {
    let mut all = args.to_vec();
    all.extend(["--data-dir", data]);
    cli_status(&all, stdin)
}

/// `sandboxd secrets VERB ARGS… --workspace acme`.
fn acme_secrets(data: &str, verb: &str, args: &[&str], stdin: &str) -> Output {
    let mut all = vec!["secrets", verb];
    all.extend(args);
    all.extend(["--workspace", "acme"]);
    run(data, &all, stdin)
}

fn secret_names(data: &str) -> String {
    let out = acme_secrets(data, "list", &[], "");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn keys_and_secrets_work_beside_a_running_server() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8 path");
    let create = ["keys", "create", "--workspace", "acme", "--inngest-env"];
    let ws_key = ok(data, &[&create[..], &["acme-env"]].concat(), "");
    let account_key = ok(data, &["keys", "create", "--account"], "");
    assert!(
        ws_key.starts_with("signkey-acmeenv-") && ws_key.len() == 80,
        "{ws_key}"
    );
    let ws_sdk_form = sdk_bearer_for(&ws_key).expect("a signing key has an SDK form");
    let or_key = ok(
        data,
        &["keys", "create", "--workspace", "acme", "--prefix", "or_"],
        "",
    );
    assert!(or_key.starts_with("or_") && or_key.len() == 67, "{or_key}");
    assert_ne!(ws_key, account_key);
    // The same workspace with a conflicting environment is refused.
    let conflict = run(data, &[&create[..], &["other"]].concat(), "");
    assert!(!conflict.status.success());
    assert!(acme_secrets(data, "set", &["TOKEN"], "s3cret-value\n")
        .status
        .success());
    assert!(acme_secrets(data, "set", &["OTHER", "--value", "x"], "")
        .status
        .success());
    assert_eq!(secret_names(data), "OTHER\nTOKEN");

    let server = Server::start(dir.path(), None);
    for key in [&ws_key, &ws_sdk_form, &or_key] {
        let list = server.request("GET", "/v2/sandboxes", key, None);
        assert_eq!(list.status, 200, "{}", list.text());
    }
    let headers = [
        ("authorization", format!("Bearer {account_key}")),
        ("x-inngest-env", "acme-env".to_owned()),
    ];
    let by_env = serve_bin::http(server.addr, "GET", "/v2/sandboxes", &headers, "");
    assert_eq!(by_env.status, 200, "{}", by_env.text());
    let no_env = server.request("GET", "/v2/sandboxes", &account_key, None);
    let code = no_env.json()["errors"][0]["code"].clone();
    assert_eq!((no_env.status, code), (400, json!("invalid_request")));

    let body = json!({"name": "keys-cli", "vcpu": 1, "memoryMb": 256, "secrets": ["TOKEN"]});
    let id = server.create_sandbox(&ws_key, &body);
    let (code, out) = server.exec(&ws_key, &id, &["/bin/sh", "-c", "printf %s \"$TOKEN\""]);
    assert_eq!((code, out.as_str()), (0, "s3cret-value"));
    server.destroy(&ws_key, &id);

    // Revoking while the server runs takes effect on the next request.
    let listing = ok(data, &["keys", "list", "--workspace", "acme"], "");
    let row = listing.lines().nth(1).expect("one acme key");
    assert!(row.contains(&ws_key[..12]) && row.contains("acme") && !row.contains(&ws_key));
    assert!(row.ends_with("\tkey"), "{row}");
    let key_id = row.split('\t').next().expect("id column");
    let alias = listing.lines().nth(2).expect("the key's SDK form");
    assert!(alias.ends_with(&format!("alias-of:{key_id}")), "{listing}");
    ok(data, &["keys", "revoke", key_id], "");
    for key in [&ws_key, &ws_sdk_form] {
        let revoked = server.request("GET", "/v2/sandboxes", key, None);
        assert_eq!(
            revoked.status, 401,
            "revoking a key revokes its SDK form too"
        );
    }
    assert!(!run(data, &["keys", "revoke", key_id], "").status.success());
    let all = ok(data, &["keys", "list"], "");
    assert!(
        all.contains("(account)") && all.lines().count() == 6,
        "{all}"
    );

    assert!(acme_secrets(data, "delete", &["TOKEN"], "")
        .status
        .success());
    assert_eq!(secret_names(data), "OTHER");
    assert!(!acme_secrets(data, "delete", &["TOKEN"], "")
        .status
        .success());
    drop(server);

    // Only hashes and ciphertext on disk.
    let mut stored = Vec::new();
    for entry in std::fs::read_dir(dir.path()).expect("data dir").flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("sandboxd.db")
        {
            stored.extend(std::fs::read(entry.path()).expect("read db"));
        }
    }
    let contains = |needle: &str| stored.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(!stored.is_empty());
    assert!(!contains(&ws_key) && !contains(&account_key) && !contains("s3cret-value"));
}

/// `sandboxd audit --workspace W --json`'s entries.
fn audit(data: &str, ws: &str) -> Vec<serde_json::Value> {
    ok(data, &["audit", "--workspace", ws, "--json"], "")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit line"))
        .collect()
}

#[test]
fn key_and_quota_changes_are_in_the_workspaces_audit_trail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8 path");
    ok(data, &["keys", "create", "--workspace", "acme"], "");
    ok(
        data,
        &["keys", "create", "--workspace", "acme", "--key-stdin"],
        "sbx_registered-key-0123456789abcdef\n",
    );
    // Another workspace's key and an account key stay out of acme's trail.
    ok(data, &["keys", "create", "--workspace", "other"], "");
    ok(data, &["keys", "create", "--account"], "");
    let listing = ok(data, &["keys", "list", "--workspace", "acme"], "");
    let ids: Vec<&str> = listing
        .lines()
        .skip(1)
        .filter(|l| l.ends_with("\tkey"))
        .map(|l| l.split('\t').next().expect("id column"))
        .collect();
    assert_eq!(ids.len(), 2, "{listing}");
    ok(data, &["keys", "revoke", ids[0]], "");
    ok(
        data,
        &["quota", "set", "--workspace", "acme", "--sandboxes", "3"],
        "",
    );

    let entries = audit(data, "acme");
    assert_eq!(entries.len(), 4, "{entries:?}");
    let got: Vec<(&str, &str, &str)> = entries
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap_or_default(),
                e["target"].as_str().unwrap_or_default(),
                e["keyId"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    let mut created: Vec<&str> = got[..2].iter().map(|(_, t, _)| *t).collect();
    created.sort_unstable();
    let mut want: Vec<&str> = ids.clone();
    want.sort_unstable();
    assert_eq!(created, want, "{entries:?}");
    let actions: Vec<&str> = got.iter().map(|(a, _, _)| *a).collect();
    assert_eq!(
        actions,
        ["key.create", "key.create", "key.revoke", "quota.set"],
        "{entries:?}"
    );
    assert_eq!(got[2].1, ids[0], "{entries:?}");
    assert!(got.iter().all(|(_, _, who)| *who == "cli"), "{entries:?}");
    assert!(entries.iter().all(|e| e["outcome"] == "ok"), "{entries:?}");
    assert_eq!(audit(data, "other").len(), 1);
}

/// A key whose scopes lack `all:all` is refused by every sandbox route: `keys create`
/// says so when it makes one (and not for an ordinary key).
#[test]
fn a_key_whose_scopes_allow_no_sandbox_operation_is_pointed_out() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8 path");
    let create = ["keys", "create", "--workspace", "acme", "--scope"];
    let warned = |out: &Output| String::from_utf8_lossy(&out.stderr).contains("all:all");
    let scoped = run(data, &[&create[..], &["billing:read"]].concat(), "");
    assert!(scoped.status.success() && warned(&scoped), "{scoped:?}");
    let all = run(data, &[&create[..], &["all:all"]].concat(), "");
    assert!(all.status.success() && !warned(&all), "{all:?}");
    let plain = run(data, &["keys", "create", "--workspace", "acme"], "");
    assert!(plain.status.success() && !warned(&plain), "{plain:?}");
}
