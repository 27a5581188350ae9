//! OpenRelay `Idempotency-Key` over a real `sandboxd serve`: replay, another body (422),
//! in flight (409), after a 4xx, resume from a seq, and after a restart; and workspace
//! templates built with `POST /v1/sandbox-templates`, then used.

mod openrelay;
mod serve_bin;

use openrelay::{check_framing, code, lines, output, Or, Stream};
use serde_json::json;

const CREATE: &str = "/v1/sandboxes";
const NDJSON: (&str, &str) = ("accept", "application/x-ndjson");

#[test]
fn idempotency_matrix() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = Or::start(dir.path(), &[]);
    let body = r#"{"template": "default", "metadata": {"a": "1", "b": "2"}, "cpu": 1}"#;
    let first = or.send("POST", CREATE, &[("idempotency-key", "key-a")], body);
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.header("idempotent-replayed"), None);
    let id = first.json()["id"].clone();
    // Same fields, other whitespace and key order: the same answer, replayed.
    let same = r#"{ "cpu":1,"metadata":{"b":"2","a":"1"},   "template":"default"}"#;
    let again = or.send("POST", CREATE, &[("idempotency-key", "key-a")], same);
    assert_eq!(
        (again.status, again.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(again.body, first.body);
    let other = or.send(
        "POST",
        CREATE,
        &[("idempotency-key", "key-a")],
        r#"{"template": "default"}"#,
    );
    assert_eq!(code(&other, 422), "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(
        or.active(),
        [id.as_str().expect("id")],
        "a replay created nothing"
    );

    // A 4xx is not kept: the retry runs.
    let bad = or.send(
        "POST",
        CREATE,
        &[("idempotency-key", "key-b")],
        r#"{"template": "nope"}"#,
    );
    assert_eq!(code(&bad, 400), "TEMPLATE_NOT_FOUND");
    let good = or.send(
        "POST",
        CREATE,
        &[("idempotency-key", "key-b")],
        r#"{"template": "default"}"#,
    );
    assert_eq!(
        (good.status, good.header("idempotent-replayed")),
        (201, None),
        "{}",
        good.text()
    );

    // A stream replayed in full, and resumed after a seq.
    let run = json!({"template": "default", "run": {"cmd": "echo one; echo two; echo three"}})
        .to_string();
    let streamed = or.send(
        "POST",
        CREATE,
        &[NDJSON, ("idempotency-key", "key-c")],
        &run,
    );
    let events = lines(&streamed.body);
    check_framing(&events, 0);
    let replay = or.send(
        "POST",
        CREATE,
        &[NDJSON, ("idempotency-key", "key-c")],
        &run,
    );
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(replay.body, streamed.body);
    let resumed = or.send(
        "POST",
        CREATE,
        &[NDJSON, ("idempotency-key", "key-c"), ("x-resume-from", "1")],
        &run,
    );
    let rest = lines(&resumed.body);
    assert_eq!(rest, events[2..].to_vec());
    check_framing(&rest, 2);
    let past_end = or.send(
        "POST",
        CREATE,
        &[
            NDJSON,
            ("idempotency-key", "key-c"),
            ("x-resume-from", "999"),
        ],
        &run,
    );
    assert_eq!((past_end.status, past_end.body.len()), (201, 0));

    // In flight: a repeat is 409, another body 422; once done, the repeat replays.
    let wait = json!({"template": "default", "run": {"cmd": "while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done"}}).to_string();
    let mut slow = Stream::open(&or, CREATE, &[("idempotency-key", "key-d")], &wait);
    let head = slow.events_until(2);
    let slow_id = head[0]["sandbox"]["id"].as_str().expect("id").to_owned();
    let dup = or.send(
        "POST",
        CREATE,
        &[NDJSON, ("idempotency-key", "key-d")],
        &wait,
    );
    assert_eq!(code(&dup, 409), "IDEMPOTENCY_KEY_IN_USE");
    let dup = or.send(
        "POST",
        CREATE,
        &[NDJSON, ("idempotency-key", "key-d")],
        r#"{"template": "default"}"#,
    );
    assert_eq!(code(&dup, 422), "IDEMPOTENCY_KEY_REUSED");
    let go = or.post(
        &format!("/v1/sandboxes/{slow_id}/exec"),
        &json!({"cmd": "touch /tmp/go"}),
    );
    assert_eq!(go.status, 200, "{}", go.text());
    let all = slow.finish();
    check_framing(&all, 0);
    assert_eq!(output(&all, "stdout"), "done\n");
    let after = or.send(
        "POST",
        CREATE,
        &[NDJSON, ("idempotency-key", "key-d")],
        &wait,
    );
    assert_eq!(after.header("idempotent-replayed"), Some("true"));
    assert_eq!(lines(&after.body), all);

    // Kept across a restart.
    drop(or);
    let or = Or::start(dir.path(), &[]);
    let again = or.send("POST", CREATE, &[("idempotency-key", "key-a")], same);
    assert_eq!(
        (again.status, again.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(again.json()["id"], id);
    // Keys are per operation and per workspace: the same key elsewhere runs anew.
    for s in or.active() {
        or.delete(&s);
    }
}

#[test]
fn workspace_templates_build_then_create() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = Or::start(dir.path(), &[]);
    let build = json!({"name": "marked", "from": "python", "run": ["echo built > /opt/marker", "python3 -c 'print(1)'"], "cpu": 1, "memoryMiB": 512});
    let r = or.post("/v1/sandbox-templates", &build);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        (
            r.json()["id"].clone(),
            r.json()["builtin"].clone(),
            r.json()["memoryMiB"].clone()
        ),
        (json!("marked"), json!(false), json!(512))
    );
    let listed = or.get("/v1/sandbox-templates").json();
    assert_eq!(listed["templates"][2]["id"], "marked", "{listed}");
    assert_eq!(
        or.active(),
        Vec::<String>::new(),
        "the build sandbox is gone"
    );

    let made = or.create(&json!({"template": "marked", "run": {"cmd": "cat /opt/marker"}}));
    assert_eq!(
        (
            made["template"].clone(),
            made["cpu"].clone(),
            made["memoryMiB"].clone()
        ),
        (json!("marked"), json!(1), json!(512))
    );
    assert_eq!(made["result"]["stdout"], "built\n", "{made}");
    let r = or.post(CREATE, &json!({"template": "marked", "memoryMiB": 513}));
    assert_eq!(code(&r, 400), "RESOURCES_EXCEED_TEMPLATE");
    let failing = or.post(
        "/v1/sandbox-templates",
        &json!({"name": "broken", "run": ["exit 7"]}),
    );
    assert_eq!(code(&failing, 400), "INVALID_REQUEST");
    assert!(
        failing.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("exit code Some(7)")),
        "{}",
        failing.text()
    );
    let r = or.post(
        "/v1/sandbox-templates",
        &json!({"name": "python", "run": []}),
    );
    assert_eq!(code(&r, 400), "INVALID_REQUEST");
    or.delete(made["id"].as_str().expect("id"));

    let r = or.send("DELETE", "/v1/sandbox-templates/marked", &[], "");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        code(&or.post(CREATE, &json!({"template": "marked"})), 400),
        "TEMPLATE_NOT_FOUND"
    );
    assert_eq!(
        code(
            &or.send("DELETE", "/v1/sandbox-templates/default", &[], ""),
            409
        ),
        "INVALID_STATE"
    );
}

#[test]
fn cli_sandbox_and_templates_verbs() {
    use serve_bin::cli_status;
    let dir = tempfile::tempdir().expect("temp dir");
    let or = Or::start(dir.path(), &[]);
    let url = format!("http://{}", or.server.addr);
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--url", &url, "--key", openrelay::MASTER]);
        let out = cli_status(&all, "");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (status, out, err) = run(&["templates", "build", "clitpl", "--run", "echo hi > /opt/x"]);
    assert_eq!(status, Some(0), "{err}");
    assert!(
        out.starts_with("clitpl  cpu=2 memoryMiB=1024 diskMiB=10240  workspace"),
        "{out}"
    );
    let (_, out, _) = run(&["templates", "list"]);
    assert!(
        out.contains("python  cpu=2 memoryMiB=2048 diskMiB=10240  built-in")
            && out.contains("clitpl"),
        "{out}"
    );

    let (status, out, err) = run(&[
        "sandbox",
        "create",
        "--template",
        "clitpl",
        "--run",
        "cat /opt/x; exit 4",
    ]);
    assert_eq!((status, out.as_str()), (Some(4), "hi\n"), "{err}");
    let (_, out, _) = run(&["sandbox", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&out).expect("list JSON");
    let id = listed["sandboxes"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (status, out, _) = run(&["sandbox", "exec", &id, "echo yo"]);
    assert_eq!((status, out.as_str()), (Some(0), "yo\n"));
    let (_, out, _) = run(&["sandbox", "pause", &id]);
    assert!(out.contains(" paused "), "{out}");
    let (_, out, _) = run(&["sandbox", "resume", &id]);
    assert!(out.contains(" running "), "{out}");
    let (_, out, _) = run(&["sandbox", "get", &id, "--json"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).expect("JSON")["template"],
        "clitpl"
    );
    let (_, out, _) = run(&["sandbox", "delete", &id]);
    assert!(out.contains(" exited (killed) "), "{out}");
    let (_, out, _) = run(&["sandbox", "list", "--exited"]);
    assert!(out.starts_with(&id), "{out}");
    let (status, _, _) = run(&["templates", "delete", "clitpl"]);
    assert_eq!(status, Some(0));
    let (status, _, err) = run(&["sandbox", "create", "--template", "clitpl"]);
    assert_eq!(status, Some(1));
    assert!(err.contains("TEMPLATE_NOT_FOUND"), "{err}");
}

/// An answer over 1 MiB is not kept (REVIEW12 #3a: the database would keep up to 16
/// MiB per key): the key is held, a repeat creates nothing and answers a clear 409
/// saying the answer cannot be replayed.
#[test]
fn an_answer_over_a_mebibyte_holds_its_key_without_being_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let or = Or::start(dir.path(), &[]);
    let run = json!({"template": "default",
        "run": {"cmd": "head -c 1200000 /dev/zero | tr '\\0' a"}})
    .to_string();
    let first = or.send("POST", CREATE, &[("idempotency-key", "key-big")], &run);
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(first.body.len() > 1 << 20, "{} bytes", first.body.len());
    let made = or.active();
    let again = or.send("POST", CREATE, &[("idempotency-key", "key-big")], &run);
    assert_eq!(code(&again, 409), "IDEMPOTENT_ANSWER_NOT_KEPT");
    assert!(
        again.text().contains("cannot be replayed"),
        "{}",
        again.text()
    );
    assert_eq!(or.active(), made, "the repeat created nothing");
    for s in or.active() {
        or.delete(&s);
    }
}
