//! The OpenRelay dialect over a real `sandboxd serve`: templates, create with every field
//! at and past its bounds, run as JSON and NDJSON, exec, pause/resume, delete, timeout,
//! history (ephemeral included), keys and permissions, capacity queueing and 503.

mod openrelay;
mod serve_bin;

use openrelay::{check_framing, code, ids, lines, make_key, output, Or};
use serde_json::{json, Value};

/// Whole seconds from RFC 3339 time `a` to `b` (both `YYYY-MM-DDTHH:MM:SS.fffffffffZ`).
fn secs_between(a: &Value, b: &Value) -> i64 {
    let secs = |v: &Value| {
        let t = v.as_str().expect("time string");
        let n = |r: std::ops::Range<usize>| t[r].parse::<i64>().expect("digits");
        let (y, m, d) = (n(0..4), n(5..7), n(8..10));
        // Days from the civil date (Howard Hinnant's algorithm).
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
        let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy;
        days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19)
    };
    secs(b) - secs(a)
}

#[test]
fn templates_run_json_and_ndjson_and_exec() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = Or::start(dir.path(), &[]);
    let templates = or.get("/v1/sandbox-templates").json();
    let names: Vec<&str> = templates["templates"]
        .as_array()
        .expect("templates")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(names, ["default", "python"]);
    assert_eq!(templates["templates"][1]["memoryMiB"], 2048);

    let created =
        or.create(&json!({"template": "python", "run": {"cmd": "python3 -c 'print(6*7)'"}}));
    assert_eq!(created["template"], "python");
    assert_eq!(created["state"], "running");
    assert_eq!(
        (created["cpu"].clone(), created["memoryMiB"].clone()),
        (json!(2), json!(2048))
    );
    assert_eq!(
        secs_between(&created["createdAt"], &created["expiresAt"]),
        300
    );
    assert!(created.get("exitReason").is_none() && created.get("endedAt").is_none());
    let result = &created["result"];
    assert_eq!(
        (result["exitCode"].clone(), result["stdout"].clone()),
        (json!(0), json!("42\n")),
        "{created}"
    );
    assert_eq!(
        (result["truncated"].clone(), result["error"].clone()),
        (json!(false), Value::Null)
    );
    assert!(result["execId"].as_str().is_some_and(|s| s.len() == 36));

    // NDJSON: sandbox first, seq 0.., output events, one final exit.
    let body = json!({"template": "default", "run": {"cmd": "echo out; echo err >&2; exit 3"}, "metadata": {"team": "a"}});
    let r = or.send(
        "POST",
        "/v1/sandboxes",
        &[("accept", "application/x-ndjson")],
        &body.to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    let events = lines(&r.body);
    check_framing(&events, 0);
    assert_eq!(events[0]["sandbox"]["metadata"], json!({"team": "a"}));
    assert_eq!(events[1]["type"], "started");
    assert_eq!(
        (output(&events, "stdout"), output(&events, "stderr")),
        ("out\n".into(), "err\n".into())
    );
    assert_eq!(events.last().map(|e| e["exitCode"].clone()), Some(json!(3)));
    let id = events[0]["sandbox"]["id"].as_str().expect("id").to_owned();

    // Completing the command does not stop the sandbox; exec runs in it.
    let exec = format!("/v1/sandboxes/{id}/exec");
    let r = or.post(
        &exec,
        &json!({"cmd": "echo $GREETING-$0", "env": {"GREETING": "hi"}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (r.json()["exitCode"].clone(), r.json()["stdout"].clone()),
        (json!(0), json!("hi-/bin/sh\n"))
    );
    let r = or.send(
        "POST",
        &exec,
        &[("accept", "application/x-ndjson")],
        &json!({"argv": ["/bin/echo", "x"]}).to_string(),
    );
    let events = lines(&r.body);
    check_framing(&events, 0);
    assert_eq!(output(&events, "stdout"), "x\n");
    assert_eq!(
        code(&or.post(&exec, &json!({"cmd": "true", "bogus": 1})), 400),
        "INVALID_REQUEST"
    );
    assert_eq!(
        code(
            &or.post("/v1/sandboxes/not-a-uuid/exec", &json!({"cmd": "true"})),
            404
        ),
        "NOT_FOUND"
    );
    for s in or.active() {
        or.delete(&s);
    }
}

#[test]
fn every_create_field_at_and_past_its_bound() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = Or::start(dir.path(), &[]);
    let accepted = [
        json!({"template": "default", "cpu": 2, "memoryMiB": 1024}),
        json!({"template": "default", "cpu": 1, "memoryMiB": 1}),
        json!({"template": "default", "timeoutSeconds": 86400, "waitSeconds": 0}),
        json!({"template": "default", "timeoutSeconds": 1, "waitSeconds": 120}),
        json!({"template": "default", "waitSeconds": 121, "autoPause": true}),
        json!({"template": "default", "cpu": 1, "cpuRequest": 1, "memoryMiB": 256, "memoryRequestMiB": 256}),
        json!({"template": "default", "cpuRequest": 0.25, "memoryRequestMiB": 128, "placement": "shared"}),
        json!({"template": "default", "placement": "shared", "env": {"A": "1"}, "metadata": {}, "ephemeral": false}),
    ];
    for body in &accepted {
        let v = or.create(body);
        if body.get("cpuRequest") == Some(&json!(1)) {
            assert_eq!(
                (v["cpuRequest"].clone(), v["memoryRequestMiB"].clone()),
                (json!(1.0), json!(256))
            );
        }
        if body.get("timeoutSeconds") == Some(&json!(86400)) {
            assert_eq!(secs_between(&v["createdAt"], &v["expiresAt"]), 86400);
        }
        assert_eq!(v["autoPause"], json!(body.get("autoPause").is_some()));
        or.delete(v["id"].as_str().expect("id"));
    }
    let refused: [(&str, &str, u16, &str); 24] = [
        (
            "{\"template\": \"default\", \"cpu\": 3}",
            "",
            400,
            "RESOURCES_EXCEED_TEMPLATE",
        ),
        (
            "{\"template\": \"default\", \"memoryMiB\": 1025}",
            "",
            400,
            "RESOURCES_EXCEED_TEMPLATE",
        ),
        (
            "{\"template\": \"default\", \"cpu\": 0}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"cpu\": -1}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"cpu\": \"1\"}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"memoryMiB\": 0}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"cpuRequest\": 0.249}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"cpu\": 1, \"cpuRequest\": 1.001}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"memoryRequestMiB\": 127}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"memoryMiB\": 200, \"memoryRequestMiB\": 201}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"timeoutSeconds\": 86401}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"timeoutSeconds\": 0}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"waitSeconds\": -1}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"placement\": \"dedicated\"}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"egress\": {\"allow\": []}, \"network\": {}}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"egress\": {\"deny\": [\"no such\"]}}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"metadata\": {\"openrelay.x\": \"1\"}}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"env\": {\"1A\": \"x\"}}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"run\": {}}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        (
            "{\"template\": \"default\", \"bogus\": true}",
            "",
            400,
            "INVALID_REQUEST",
        ),
        ("{\"template\": \"nope\"}", "", 400, "TEMPLATE_NOT_FOUND"),
        ("{\"cpu\": 1}", "", 400, "INVALID_REQUEST"),
        ("{\"template\": \"default\"} {}", "", 400, "INVALID_REQUEST"),
        (
            "{\"template\": \"default\"}",
            "text/plain",
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
    ];
    for (body, content_type, status, want) in refused {
        let headers: Vec<(&str, &str)> = match content_type {
            "" => vec![],
            ct => vec![("content-type", ct)],
        };
        let r = or.send("POST", "/v1/sandboxes", &headers, body);
        assert_eq!(code(&r, status), want, "{body}");
    }
    let long_key = "k".repeat(513);
    for (name, value, want) in [
        ("idempotency-key", "", "INVALID_IDEMPOTENCY_KEY"),
        (
            "idempotency-key",
            long_key.as_str(),
            "INVALID_IDEMPOTENCY_KEY",
        ),
        ("x-resume-from", "-1", "INVALID_REQUEST"),
        ("x-resume-from", "x", "INVALID_REQUEST"),
    ] {
        let r = or.send(
            "POST",
            "/v1/sandboxes",
            &[(name, value)],
            "{\"template\": \"default\"}",
        );
        assert_eq!(code(&r, 400), want, "{name}: {value:?}");
    }
    assert_eq!(
        or.active(),
        Vec::<String>::new(),
        "a refused create made a sandbox"
    );
    let r = or.send(
        "POST",
        "/v1/sandboxes",
        &[("idempotency-key", &"k".repeat(512))],
        "{\"template\": \"default\"}",
    );
    assert_eq!(r.status, 201, "{}", r.text());
    or.delete(r.json()["id"].as_str().expect("id"));
}

#[test]
fn lifecycle_timeout_history_and_ephemeral() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = Or::start(dir.path(), &[]);
    let a = or.create(&json!({"template": "default"}));
    let b = or.create(&json!({"template": "default", "ephemeral": true}));
    let (a_id, b_id) = (a["id"].as_str().expect("id"), b["id"].as_str().expect("id"));
    assert_eq!(or.active(), [b_id, a_id], "active sandboxes newest first");

    // Pause: state paused, exec refused, resume back to running, timeout unchanged.
    let r = or.send("POST", &format!("/v1/sandboxes/{a_id}/pause"), &[], "");
    assert_eq!(
        (r.status, r.json()["state"].clone()),
        (200, json!("paused")),
        "{}",
        r.text()
    );
    assert_eq!(
        or.get(&format!("/v1/sandboxes/{a_id}")).json()["state"],
        "paused"
    );
    assert_eq!(
        code(
            &or.post(
                &format!("/v1/sandboxes/{a_id}/exec"),
                &json!({"cmd": "true"})
            ),
            409
        ),
        "INVALID_STATE"
    );
    let r = or.send("POST", &format!("/v1/sandboxes/{a_id}/resume"), &[], "");
    assert_eq!(r.json()["state"], "running");
    assert_eq!(r.json()["expiresAt"], a["expiresAt"]);

    // Delete: exited, killed, in history; the ephemeral one leaves no history.
    let gone = or.delete(a_id);
    assert_eq!(
        (gone["state"].clone(), gone["exitReason"].clone()),
        (json!("exited"), json!("killed"))
    );
    assert!(gone["endedAt"].is_string());
    or.delete(b_id);
    assert_eq!(
        or.get(&format!("/v1/sandboxes/{a_id}")).json()["exitReason"],
        "killed"
    );
    assert_eq!(
        code(&or.get(&format!("/v1/sandboxes/{b_id}")), 404),
        "NOT_FOUND"
    );

    // Timeout: the sandbox ends by itself with exitReason timeout.
    let t = or.create(&json!({"template": "default", "timeoutSeconds": 1}));
    let t_id = t["id"].as_str().expect("id");
    let ended = loop {
        let v = or.get(&format!("/v1/sandboxes/{t_id}")).json();
        if v["state"] == "exited" {
            break v;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(ended["exitReason"], "timeout");
    let history = or.get("/v1/sandboxes?state=exited").json();
    assert_eq!(
        ids(&history),
        [t_id, a_id],
        "history by end time, no ephemeral"
    );
    let page = or.get("/v1/sandboxes?state=exited&limit=1").json();
    assert_eq!(ids(&page), [t_id]);
    let cursor = page["nextCursor"].as_str().expect("cursor");
    let next = or
        .get(&format!(
            "/v1/sandboxes?state=exited&limit=1&cursor={cursor}"
        ))
        .json();
    assert_eq!(
        (ids(&next), next["nextCursor"].clone()),
        (vec![a_id.to_owned()], Value::Null)
    );
    assert_eq!(or.active(), Vec::<String>::new());

    // Paused, the timeout still counts.
    let p = or.create(&json!({"template": "default", "timeoutSeconds": 1}));
    let p_id = p["id"].as_str().expect("id");
    let r = or.send("POST", &format!("/v1/sandboxes/{p_id}/pause"), &[], "");
    assert_eq!(r.json()["state"], "paused", "{}", r.text());
    let ended = loop {
        let v = or.get(&format!("/v1/sandboxes/{p_id}")).json();
        if v["state"] == "exited" {
            break v;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(ended["exitReason"], "timeout");

    // History older than 24 hours answers 404 and leaves the list.
    let store = sandboxd_store::SqliteStore::open(dir.path().join("sandboxd.db")).expect("store");
    use sandboxd_store::Store;
    let mut rec = store
        .get_sandbox(a_id.parse().expect("uuid"))
        .expect("read")
        .expect("row");
    rec.ended_at = rec
        .ended_at
        .map(|t| t - std::time::Duration::from_secs(25 * 3600));
    store.update_sandbox(&rec).expect("age the row");
    assert_eq!(
        code(&or.get(&format!("/v1/sandboxes/{a_id}")), 404),
        "NOT_FOUND"
    );
    assert_eq!(
        ids(&or.get("/v1/sandboxes?state=exited").json()),
        [p_id, t_id]
    );
    assert_eq!(
        code(&or.get("/v1/sandboxes?state=nope"), 400),
        "INVALID_REQUEST"
    );
    assert_eq!(
        code(&or.get("/v1/sandboxes?limit=0"), 400),
        "INVALID_REQUEST"
    );
    assert_eq!(
        code(&or.get("/v1/sandboxes?limit=101"), 400),
        "INVALID_REQUEST"
    );
}

#[test]
fn keys_and_permissions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = Or::start(dir.path(), &[]);
    let reader = make_key(
        dir.path(),
        &["--prefix", "or_", "--permission", "sandboxes.read"],
    );
    let legacy = make_key(dir.path(), &["--prefix", "vl_"]);
    assert!(reader.starts_with("or_") && legacy.starts_with("vl_"));
    let body = "{\"template\": \"default\"}";
    let r = or
        .with_key(&reader)
        .send("POST", "/v1/sandboxes", &[], body);
    assert_eq!(code(&r, 403), "PERMISSION_DENIED");
    assert_eq!(r.json()["permission"], "sandboxes.create");
    assert_eq!(
        or.with_key(&reader)
            .send("GET", "/v1/sandboxes", &[], "")
            .status,
        200
    );
    let r = or
        .with_key(&legacy)
        .send("POST", "/v1/sandboxes", &[], body);
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().expect("id").to_owned();
    let r = or
        .with_key(&reader)
        .send("DELETE", &format!("/v1/sandboxes/{id}"), &[], "");
    assert_eq!(
        (code(&r, 403), r.json()["permission"].clone()),
        ("PERMISSION_DENIED".into(), json!("sandboxes.delete"))
    );
    assert_eq!(
        code(
            &or.with_key("or_nothing")
                .send("GET", "/v1/sandboxes", &[], ""),
            401
        ),
        "UNAUTHENTICATED"
    );
    // A template from a sandbox (`fromSandbox`) snapshots that sandbox, memory and all:
    // the key needs the sandbox's read and update too, not only template writes.
    let templater = make_key(
        dir.path(),
        &["--prefix", "or_", "--permission", "sandbox-templates.write"],
    );
    let from = json!({"name": "copied", "fromSandbox": id}).to_string();
    let r = or
        .with_key(&templater)
        .send("POST", "/v1/sandbox-templates", &[], &from);
    assert_eq!(code(&r, 403), "PERMISSION_DENIED", "{}", r.text());
    or.delete(&id);
}

#[test]
fn capacity_queues_then_answers_503() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = Or::start(dir.path(), &[("SANDBOXD_MAX_SANDBOXES", "1")]);
    let first = or.create(&json!({"template": "default", "waitSeconds": 0}));
    let r = or.post(
        "/v1/sandboxes",
        &json!({"template": "default", "waitSeconds": 0}),
    );
    assert_eq!(code(&r, 503), "CAPACITY_EXHAUSTED");
    let r = or.post(
        "/v1/sandboxes",
        &json!({"template": "default", "waitSeconds": 1}),
    );
    assert_eq!(code(&r, 503), "CAPACITY_EXHAUSTED");
    // A queued create gets the capacity a deleted sandbox frees.
    let queued = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            or.post(
                "/v1/sandboxes",
                &json!({"template": "default", "waitSeconds": 120}),
            )
        });
        or.delete(first["id"].as_str().expect("id"));
        waiting.join().expect("queued create")
    });
    assert_eq!(queued.status, 201, "{}", queued.text());
    or.delete(queued.json()["id"].as_str().expect("id"));
}

/// The sandbox's cgroup file `name` under controller `ctrl` (serve's parent `sandboxd`).
fn cgroup_file(ctrl: &str, id: &str, name: &str) -> String {
    std::fs::read_to_string(format!("/sys/fs/cgroup/{ctrl}/sandboxd/{id}/{name}"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[test]
fn requests_are_soft_guarantees_and_pinned_gets_dedicated_cpus() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = Or::start(dir.path(), &[]);
    let shared = or.create(&json!({"template": "default", "cpu": 1, "cpuRequest": 0.5, "memoryMiB": 512, "memoryRequestMiB": 256}));
    let id = shared["id"].as_str().expect("id");
    assert_eq!(cgroup_file("cpu", id, "cpu.shares"), "512");
    assert_eq!(
        cgroup_file("memory", id, "memory.soft_limit_in_bytes"),
        (256u64 << 20).to_string()
    );
    assert_eq!(
        cgroup_file("memory", id, "memory.limit_in_bytes"),
        (512u64 << 20).to_string()
    );
    or.delete(id);

    // Pinned: the request is the limit; each pinned sandbox gets CPUs no other holds.
    let host_cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let allowed = "grep Cpus_allowed_list /proc/self/status | cut -f2";
    let mut pinned = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..host_cpus {
        let v = or.create(&json!({"template": "default", "cpu": 1, "placement": "pinned", "run": {"cmd": allowed}}));
        assert_eq!(
            (
                v["placement"].clone(),
                v["cpuRequest"].clone(),
                v["memoryRequestMiB"].clone()
            ),
            (json!("pinned"), json!(1.0), json!(1024))
        );
        let cpu = v["result"]["stdout"]
            .as_str()
            .expect("stdout")
            .trim()
            .to_owned();
        assert!(cpu.parse::<u32>().is_ok(), "one CPU, not {cpu:?}");
        assert!(seen.insert(cpu), "a CPU was given twice");
        pinned.push(v["id"].as_str().expect("id").to_owned());
    }
    // None free: refused after waitSeconds, nothing created; a freed CPU is reused.
    let r = or.post(
        "/v1/sandboxes",
        &json!({"template": "default", "cpu": 1, "placement": "pinned", "waitSeconds": 0}),
    );
    assert_eq!(code(&r, 503), "CAPACITY_EXHAUSTED");
    assert_eq!(or.active().len(), pinned.len());
    let shared = or.create(&json!({"template": "default", "run": {"cmd": allowed}}));
    let every = match host_cpus {
        1 => "0".to_owned(),
        n => format!("0-{}", n - 1),
    };
    assert_eq!(
        shared["result"]["stdout"].as_str().map(str::trim),
        Some(every.as_str()),
        "shared runs anywhere"
    );
    or.delete(shared["id"].as_str().expect("id"));
    or.delete(&pinned[0]);
    let again = or
        .create(&json!({"template": "default", "cpu": 1, "placement": "pinned", "waitSeconds": 0}));
    pinned[0] = again["id"].as_str().expect("id").to_owned();
    for id in &pinned {
        or.delete(id);
        assert!(
            !std::path::Path::new(&format!("/sys/fs/cgroup/cpuset/sandboxd/{id}")).exists(),
            "cpuset left behind"
        );
    }
}
