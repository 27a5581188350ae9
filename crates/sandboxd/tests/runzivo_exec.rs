//! Runzivo streamed exec against a real `sandboxd serve`: every request limit at and
//! just past its boundary, NDJSON framing, binary round trips, the 8 MiB cap, the
//! timeout path (grace shortened to 1 s via SANDBOXD_EXEC_KILL_GRACE_SECONDS),
//! cancellation on disconnect, the session limit and the sandbox ending mid-command.

mod runzivo_api;

use futures_util::StreamExt;
use http_body_util::BodyStream;
use runzivo_api::{collect, Server};
use serde_json::{json, Value};

/// Reads a streamed answer until its first whole NDJSON line.
async fn first_line(body: &mut BodyStream<hyper::body::Incoming>) -> Value {
    let mut buf = Vec::new();
    while !buf.contains(&b'\n') {
        let frame = body.next().await.expect("a line").expect("body");
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
    let end = buf.iter().position(|b| *b == b'\n').unwrap();
    serde_json::from_slice(&buf[..end]).expect("json line")
}

#[tokio::test(flavor = "multi_thread")]
async fn request_limits_at_and_past_each_boundary() {
    let s = Server::start(30);
    let id = s.create().await;
    let path = s.path(&format!("/{id}/exec"));
    let ok = |body: Value| {
        let (s, path) = (&s, path.clone());
        async move {
            let lines = s.json("POST", &path, &body).await.lines();
            collect(&lines).1["exit_code"].as_i64().expect("exit code")
        }
    };
    let bad = |body: Value| {
        let (s, path) = (&s, path.clone());
        async move {
            s.json("POST", &path, &body)
                .await
                .expect(400, "invalid_request")
        }
    };
    // cmd: nonblank, at most 64 KiB, no NUL.
    let pad = |n: usize| format!("true #{}", "x".repeat(n - 6));
    assert_eq!(ok(json!({"cmd": pad(64 * 1024)})).await, 0);
    bad(json!({"cmd": pad(64 * 1024 + 1)})).await;
    bad(json!({"cmd": " \n\t "})).await;
    bad(json!({"cmd": ""})).await;
    bad(json!({"cmd": "echo a\u{0}b"})).await;
    bad(json!({})).await;
    // cwd: absolute, at most 1024 characters.
    let long = format!("/workspace/{}", vec!["d".repeat(200); 5].join("/"));
    let long = format!("{long}/{}", "e".repeat(1024 - long.len() - 1));
    assert_eq!(long.len(), 1024);
    s.sh(&id, &format!("mkdir -p {long} {long}x")).await;
    let pwd = s.exec(&id, "pwd", json!({"cwd": long})).await;
    assert_eq!(
        String::from_utf8(collect(&pwd).0).unwrap(),
        format!("{long}\n")
    );
    bad(json!({"cmd": "pwd", "cwd": format!("{long}x")})).await;
    bad(json!({"cmd": "pwd", "cwd": "workspace"})).await;
    bad(json!({"cmd": "pwd", "cwd": "/no/such/dir"})).await;
    // env: at most 64 variables, names by the regex, values at most 8192 bytes, no NUL.
    let vars = |n: usize| {
        (0..n)
            .map(|i| (format!("V{i}"), json!("x")))
            .collect::<serde_json::Map<_, _>>()
    };
    assert_eq!(
        ok(json!({"cmd": "test \"$V63\" = x", "env": vars(64)})).await,
        0
    );
    bad(json!({"cmd": "true", "env": vars(65)})).await;
    let name = format!("_{}", "a".repeat(127));
    assert_eq!(
        ok(json!({"cmd": format!("test \"${name}\" = y"), "env": {name.clone(): "y"}})).await,
        0
    );
    bad(json!({"cmd": "true", "env": {format!("{name}a"): "y"}})).await;
    for name in ["1A", "A-B", "", "A B", "É"] {
        bad(json!({"cmd": "true", "env": {name: "y"}})).await;
    }
    let value = "v".repeat(8192);
    assert_eq!(
        ok(json!({"cmd": "test ${#BIG} = 8192", "env": {"BIG": value}})).await,
        0
    );
    bad(json!({"cmd": "true", "env": {"BIG": "v".repeat(8193)}})).await;
    bad(json!({"cmd": "true", "env": {"NUL": "a\u{0}b"}})).await;
    // timeout_seconds: 1-3600, an integer.
    for t in [1, 3600] {
        assert_eq!(ok(json!({"cmd": "true", "timeout_seconds": t})).await, 0);
    }
    for t in [
        json!(0),
        json!(3601),
        json!(-1),
        json!(1.5),
        json!("5"),
        json!(null),
    ] {
        if t.is_null() {
            assert_eq!(ok(json!({"cmd": "true", "timeout_seconds": t})).await, 0);
        } else {
            bad(json!({"cmd": "true", "timeout_seconds": t})).await;
        }
    }
    // Body: at most 128 KiB, application/json, one value, no unknown fields.
    let key = Some(s.keys.writer.as_str());
    let ct = Some("application/json");
    let sized = |n: usize| {
        let json = json!({"cmd": "true"}).to_string();
        format!("{json}{}", " ".repeat(n - json.len()))
    };
    let at = s.call("POST", &path, key, ct, sized(128 * 1024)).await;
    assert_eq!(collect(&at.lines()).1["exit_code"], 0);
    s.call("POST", &path, key, ct, sized(128 * 1024 + 1))
        .await
        .expect(400, "invalid_request");
    let body = json!({"cmd": "true"}).to_string();
    s.call("POST", &path, key, None, body.clone())
        .await
        .expect(400, "invalid_request");
    s.call("POST", &path, key, Some("text/plain"), body.clone())
        .await
        .expect(400, "invalid_request");
    for raw in [
        "",
        "{",
        "{\"cmd\":\"true\"} {}",
        "[]",
        "{\"cmd\":\"true\",\"shell\":\"sh\"}",
    ] {
        s.call("POST", &path, key, ct, raw)
            .await
            .expect(400, "invalid_request");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ndjson_framing_and_binary_round_trip() {
    let s = Server::start(30);
    let id = s.create().await;
    let all_bytes = "for i in $(seq 0 255); do printf \"\\\\$(printf %03o $i)\"; done";
    let lines = s.exec(&id, all_bytes, Value::Null).await;
    let (out, exit) = collect(&lines);
    assert_eq!(out, (0..=255u8).collect::<Vec<u8>>());
    assert_eq!(
        exit,
        json!({"type":"exit","exit_code":0,"timed_out":false,"truncated":false})
    );

    let lines = s
        .exec(&id, "echo out; echo err >&2; exit 7", Value::Null)
        .await;
    let streams: Vec<(&str, String)> = lines[..lines.len() - 1]
        .iter()
        .map(|l| {
            use base64::Engine;
            let data = base64::engine::general_purpose::STANDARD
                .decode(l["data"].as_str().unwrap())
                .unwrap();
            (
                l["type"].as_str().unwrap(),
                String::from_utf8(data).unwrap(),
            )
        })
        .collect();
    assert!(
        streams.contains(&("stdout", "out\n".into()))
            && streams.contains(&("stderr", "err\n".into())),
        "{streams:?}"
    );
    assert_eq!(collect(&lines).1["exit_code"], 7);

    let login = s
        .sh(
            &id,
            "shopt -q login_shell && echo login; echo $0; echo \"$GREETING\"",
        )
        .await;
    assert_eq!(login, "login\n/bin/bash\n\n");
    let env = s
        .exec(
            &id,
            "echo \"$GREETING $PATH\"",
            json!({"env": {"GREETING": "hi"}}),
        )
        .await;
    let text = String::from_utf8(collect(&env).0).unwrap();
    assert!(
        text.starts_with("hi /") && text.contains("/usr/bin"),
        "{text}"
    );
    let killed = s.exec(&id, "kill -9 $$", Value::Null).await;
    assert_eq!(collect(&killed).1["exit_code"], 137);
}

#[tokio::test(flavor = "multi_thread")]
async fn output_cap_truncates_with_137() {
    let s = Server::start(30);
    let id = s.create().await;
    let lines = s.exec(&id, "cat /dev/zero", Value::Null).await;
    let (out, exit) = collect(&lines);
    assert_eq!(out.len(), 8 * 1024 * 1024);
    assert!(out.iter().all(|b| *b == 0));
    assert_eq!(
        exit,
        json!({"type":"exit","exit_code":137,"timed_out":false,"truncated":true})
    );
    // The whole group died: nothing is left reading /dev/zero.
    assert_eq!(s.sh(&id, "pgrep -x cat | wc -l").await, "0\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn timeout_then_grace_then_124() {
    let s = Server::start(1);
    let id = s.create().await;
    // Ignores SIGTERM: killed when the (shortened) grace has passed.
    let stubborn = "trap '' TERM; echo started; while :; do sleep 1; done";
    let lines = s.exec(&id, stubborn, json!({"timeout_seconds": 1})).await;
    let (out, exit) = collect(&lines);
    assert_eq!(out, b"started\n");
    assert_eq!(
        exit,
        json!({"type":"exit","exit_code":124,"timed_out":true,"truncated":false})
    );
    // Ends at the SIGTERM.
    let lines = s
        .exec(&id, "sleep 1000", json!({"timeout_seconds": 1}))
        .await;
    assert_eq!(collect(&lines).1["exit_code"], 124);
    assert_eq!(collect(&lines).1["timed_out"], true);
    assert_eq!(s.sh(&id, "pgrep -x sleep | wc -l").await, "0\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn disconnect_cancels_the_process_group_and_the_fifth_command_is_refused() {
    let s = Server::start(30);
    let id = s.create().await;
    let path = s.path(&format!("/{id}/exec"));
    let key = Some(s.keys.writer.as_str());
    let ct = Some("application/json");
    let mut held = Vec::new();
    for i in 0..4 {
        let cmd = format!("sleep 1000 & echo $! > /workspace/child{i}; echo up; wait");
        let response = s
            .open("POST", &path, key, ct, json!({"cmd": cmd}).to_string())
            .await;
        assert_eq!(response.status(), 200);
        let mut body = BodyStream::new(response.into_body());
        assert_eq!(first_line(&mut body).await["type"], "stdout");
        held.push(body);
    }
    let fifth = s
        .call("POST", &path, key, ct, json!({"cmd": "true"}).to_string())
        .await;
    fifth.expect(409, "session_limit_reached");

    // Hang up on the first command: its background child dies with its group.
    drop(held.remove(0));
    let gone = "pid=$(cat /workspace/child0); while kill -0 $pid 2>/dev/null; do sleep 0.1; done; echo gone";
    // One slot is free once the cancelled command is reaped; retry until then.
    let out = loop {
        let reply = s.json("POST", &path, &json!({"cmd": gone})).await;
        if reply.status == 409 {
            tokio::task::yield_now().await;
            continue;
        }
        break String::from_utf8(collect(&reply.lines()).0).unwrap();
    };
    assert_eq!(out, "gone\n");
    // Deleting the sandbox ends the others with reason `deleted`.
    let del = s
        .call("DELETE", &s.path(&format!("/{id}")), key, None, "")
        .await;
    assert_eq!(del.status, 200);
    for mut body in held {
        let mut rest = Vec::new();
        while let Some(frame) = body.next().await {
            if let Ok(data) = frame.expect("body").into_data() {
                rest.extend_from_slice(&data);
            }
        }
        let last = rest
            .split(|b| *b == b'\n')
            .rfind(|l| !l.is_empty())
            .expect("exit line");
        let exit: Value = serde_json::from_slice(last).unwrap();
        assert_eq!(
            (exit["type"].as_str(), exit["reason"].as_str()),
            (Some("exit"), Some("deleted")),
            "{exit}"
        );
    }
}

/// Clients that hang up while their command is being started (any moment from before
/// the request is read to after its first answer) leave nothing running: a start the
/// server had sent to the agent is finished and handed to its driver, which ends the
/// command as for any reader that went away. Before, a handler dropped between the
/// agent's start and the driver left the command running with no timeout, output cap
/// or session count.
#[tokio::test(flavor = "multi_thread")]
async fn hang_ups_during_the_start_leave_no_command_running() {
    let s = Server::start(30);
    let id = s.create().await;
    let path = s.path(&format!("/{id}/exec"));
    let key = Some(s.keys.writer.as_str());
    let body = json!({"cmd": "exec sleep 1000"}).to_string();
    for step in 0..60u64 {
        let open = s.open("POST", &path, key, Some("application/json"), body.clone());
        let _ = tokio::time::timeout(std::time::Duration::from_micros(step * 100), open).await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Counted by a command of its own, once a session is free (the hung-up ones end).
    let count = json!({"cmd": "pgrep -x sleep | wc -l"});
    loop {
        let reply = s.json("POST", &path, &count).await;
        let left = match reply.status {
            409 => "no session free".to_string(),
            _ => String::from_utf8(collect(&reply.lines()).0).expect("utf-8"),
        };
        if left == "0\n" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "commands left running after their clients hung up: {left}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
