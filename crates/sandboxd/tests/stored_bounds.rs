//! What a client may store with a sandbox is bounded in every dialect: OpenRelay's
//! metadata (64 keys, keys of at most 128 bytes, values of at most 512) and each
//! dialect's create environment (the engine's 256 variables, 32 KiB values, 64 KiB in
//! all; Runzivo's own spec's 64 variables of 8192 bytes). Past a bound the create is
//! that dialect's 400 and nothing is made; at the bound it is created. So are the
//! secrets a sandbox names (256, Inngest's `secrets`) and its egress policy layer
//! (256 allow and 256 deny rules, OpenRelay's `network` and `egress`).

mod serve_bin;

use serde_json::{json, Map, Value};
use serve_bin::Server;

const MASTER: &str = "stored-bounds-master-key";
const RUNZIVO: &str = "/v1/customer/tenants/default/sandboxes";

/// A server that deletes every sandbox it still has when dropped (a failed assertion
/// included: a create wrongly admitted leaves nothing running).
struct Served(Server);

impl std::ops::Deref for Served {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.0
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let list = self.0.request("GET", "/v2/sandboxes", MASTER, None).json();
        for sb in list["data"].as_array().into_iter().flatten() {
            if let (Some(id), false) = (sb["id"].as_str(), sb["status"] == "TERMINATED") {
                let path = format!("/v2/sandboxes/{id}");
                let _ = self.0.request("DELETE", &path, MASTER, None);
                for _ in 0..500 {
                    let got = self.0.request("GET", &path, MASTER, None).json();
                    if got["data"]["status"] == "TERMINATED" {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
    }
}

fn server(dir: &tempfile::TempDir) -> Served {
    Served(Server::start_with_env(
        dir.path(),
        Some(MASTER),
        &[("SANDBOXD_NETWORK", "none")],
    ))
}

/// A map of `n` entries named `{prefix}{i}` padded to `key_len` bytes, values of
/// `value_len` bytes.
fn map(n: usize, prefix: &str, key_len: usize, value_len: usize) -> Value {
    let mut m = Map::new();
    for i in 0..n {
        let mut k = format!("{prefix}{i}");
        while k.len() < key_len {
            k.push('k');
        }
        m.insert(k, json!("v".repeat(value_len)));
    }
    Value::Object(m)
}

/// The sandboxes the server still runs, in any dialect (Inngest lists them all).
fn sandboxes(s: &Server) -> usize {
    let list = s.request("GET", "/v2/sandboxes", MASTER, None).json();
    list["data"].as_array().map_or(0, |a| {
        a.iter().filter(|s| s["status"] != "TERMINATED").count()
    })
}

fn openrelay_create(s: &Server, extra: Value) -> serve_bin::Reply {
    let mut body = json!({"template": "default"});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    s.request("POST", "/v1/sandboxes", MASTER, Some(&body))
}

fn assert_openrelay_400(r: &serve_bin::Reply, says: &str) {
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["code"], "INVALID_REQUEST", "{v}");
    assert!(v["requestId"].is_string(), "{v}");
    let message = v["error"].as_str().expect("error");
    assert!(message.contains(says), "{message}");
}

#[test]
fn openrelay_metadata_past_its_bounds_is_a_400_and_at_them_is_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = server(&dir);
    let keys = openrelay_create(&s, json!({"metadata": map(65, "k", 1, 1)}));
    assert_openrelay_400(&keys, "at most 64");
    let key = openrelay_create(&s, json!({"metadata": map(1, "k", 129, 1)}));
    assert_openrelay_400(&key, "128 bytes");
    let value = openrelay_create(&s, json!({"metadata": map(1, "k", 1, 513)}));
    assert_openrelay_400(&value, "512 bytes");
    // The probe's 0.9 MB of metadata (1000 keys of 900 bytes).
    let probe = openrelay_create(&s, json!({"metadata": map(1000, "k", 2, 900)}));
    assert_eq!(probe.status, 400, "{}", probe.text());
    assert_eq!(sandboxes(&s), 0, "a refused create left a sandbox");

    let most = map(64, "k", 128, 512);
    let made = openrelay_create(&s, json!({"metadata": most}));
    assert_eq!(made.status, 201, "{}", made.text());
    let v = made.json();
    assert_eq!(
        v["metadata"], most,
        "the metadata at its bounds is kept whole"
    );
    let id = v["id"].as_str().expect("id");
    let del = s.request("DELETE", &format!("/v1/sandboxes/{id}"), MASTER, None);
    assert_eq!(del.status / 100, 2, "{}", del.text());
}

#[test]
fn a_create_environment_past_its_bounds_is_a_400_in_each_dialect() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = server(&dir);
    // OpenRelay: too many variables, a value too long, too much in all.
    let many = openrelay_create(&s, json!({"env": map(257, "V", 1, 1)}));
    assert_openrelay_400(&many, "at most 256");
    let long = openrelay_create(&s, json!({"env": map(1, "V", 1, 33 << 10)}));
    assert_openrelay_400(&long, "32768 bytes");
    let all = openrelay_create(&s, json!({"env": map(3, "V", 1, 30 << 10)}));
    assert_openrelay_400(&all, "at most 65536");

    // Inngest: the same bounds, its own shape.
    let inngest = |env: Value| {
        let body = json!({"name": "env", "vcpu": 1, "memoryMb": 128, "environment": env});
        s.request("POST", "/v2/sandboxes", MASTER, Some(&body))
    };
    for env in [
        map(257, "V", 1, 1),
        map(1, "V", 1, 33 << 10),
        map(3, "V", 1, 30 << 10),
    ] {
        let r = inngest(env);
        assert_eq!(r.status, 400, "{}", r.text());
        let v = r.json();
        assert_eq!(v["errors"][0]["code"], "invalid_field_format", "{v}");
        assert!(
            v["errors"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("environment")),
            "{v}"
        );
    }

    // Runzivo: its spec's bounds of a command's env.
    for env in [
        map(65, "V", 1, 1),
        map(1, "V", 1, 8193),
        map(1, "V", 129, 1),
    ] {
        let r = s.request("POST", RUNZIVO, MASTER, Some(&json!({"env": env})));
        assert_eq!(r.status, 400, "{}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["code"], "invalid_request", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("env")),
            "{v}"
        );
    }
    assert_eq!(sandboxes(&s), 0, "a refused create left a sandbox");
}

#[test]
fn inngest_secrets_past_their_bound_are_a_400_before_any_is_looked_up() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = server(&dir);
    // The probe's list: one name repeated to fill most of the 1 MiB body, and just
    // past the bound (none of these secrets exists: the bound is checked first).
    for secrets in [vec!["TOKEN"; 100_000], vec!["TOKEN"; 257]] {
        let body = json!({"name": "sec", "vcpu": 1, "memoryMb": 128, "secrets": secrets});
        let r = s.request("POST", "/v2/sandboxes", MASTER, Some(&body));
        assert_eq!(r.status, 400, "{}", r.text());
        let v = r.json();
        assert_eq!(v["errors"][0]["code"], "invalid_field_format", "{v}");
        let message = v["errors"][0]["message"].as_str().expect("message");
        assert!(message.contains("at most 256"), "{message}");
    }
    // At the bound the names are looked up (none exists here): not the bound's 400.
    let body = json!({"name": "sec", "vcpu": 1, "memoryMb": 128, "secrets": vec!["TOKEN"; 256]});
    let r = s.request("POST", "/v2/sandboxes", MASTER, Some(&body));
    assert!(!r.text().contains("at most 256"), "{}", r.text());
    assert_eq!(r.status / 100, 4, "{}", r.text());
    assert_eq!(sandboxes(&s), 0, "a refused create left a sandbox");
}

#[test]
fn openrelay_egress_rule_lists_past_their_bound_are_a_400_in_both_shapes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = server(&dir);
    let rules = |n: usize| -> Vec<String> { (0..n).map(|i| format!("h{i}.example")).collect() };
    for extra in [
        json!({"egress": {"allow": rules(257)}}),
        json!({"egress": {"deny": rules(257)}}),
        json!({"network": {"mode": "egress", "deny": rules(257)}}),
        json!({"network": {"allow": rules(20_000)}}),
    ] {
        let r = openrelay_create(&s, extra);
        assert_openrelay_400(&r, "at most 256");
    }
    // One rule of most of a megabyte: refused, and the answer does not echo it.
    let huge = "a".repeat(900_000);
    let r = openrelay_create(&s, json!({"egress": {"deny": [huge]}}));
    assert_openrelay_400(&r, "neither an IPv4 CIDR nor a domain name");
    assert!(
        r.text().len() < 4096,
        "the answer echoes the rule: {} bytes",
        r.text().len()
    );
    assert_eq!(sandboxes(&s), 0, "a refused create left a sandbox");
}
