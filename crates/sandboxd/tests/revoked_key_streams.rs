//! A revoked API key loses what it already opened (REVIEW11 #7), through a real `sandboxd
//! serve` and a revoke by `sandboxd keys revoke` in another process on its data dir:
//! a followed log and process output, a process wait and a captured exec (Inngest), an
//! OpenRelay exec, a file download, a Runzivo streamed exec and a Runzivo terminal each
//! end (in the dialect's shape), a terminal ticket the key
//! bought earlier is refused, new requests get 401, and the commands those requests
//! started are not killed (each finishes its work after the revoke).

mod runzivo_api;
mod serve_bin;

use futures_util::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use serve_bin::{cli, Reply, Server};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// Longest a stream may take to end after the revoke before the test calls it a hang
/// (the server re-reads keys every second; this only bounds a broken server).
const ENDS_WITHIN: Duration = Duration::from_secs(60);

/// Bytes of the file downloaded across the revoke (far more than socket buffers hold;
/// within the dialect's 100 MiB download limit).
const BIG: usize = 96 << 20;

/// A command that says it started, waits for the test's go, then leaves its mark:
/// the mark appears only if the command outlived the revoke.
fn waiter(name: &str) -> String {
    format!(
        "touch /tmp/{name}.started; while [ ! -e /tmp/go ]; do sleep 0.1; done; \
         touch /tmp/{name}.ran-on"
    )
}

/// Sends one request on a connection of its own and reads the whole answer (the
/// connection is closed by the server at its end); `None` if it did not end in time.
fn whole_answer(addr: SocketAddr, head: String, body: String) -> Option<Reply> {
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(ENDS_WITHIN)).expect("timeout");
    conn.write_all(head.as_bytes()).expect("send");
    conn.write_all(body.as_bytes()).expect("send");
    let mut raw = Vec::new();
    match conn.read_to_end(&mut raw) {
        Ok(_) => Some(serve_bin::parse_response(&raw)),
        Err(_) => None,
    }
}

fn request_head(addr: SocketAddr, method: &str, path: &str, key: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         authorization: Bearer {key}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    )
}

/// A key of workspace `team` and its id.
fn team_key(data: &str) -> (String, String) {
    let made = cli(
        &["keys", "create", "--workspace", "team", "--data-dir", data],
        "",
    );
    let key = String::from_utf8(made.stdout)
        .expect("utf-8")
        .trim()
        .to_owned();
    let listing = cli(
        &["keys", "list", "--workspace", "team", "--data-dir", data],
        "",
    );
    let listing = String::from_utf8(listing.stdout).expect("utf-8");
    let id = listing
        .lines()
        .find(|row| row.contains(&key[..12]) && row.ends_with("\tkey"))
        .and_then(|row| row.split('\t').next())
        .unwrap_or_else(|| panic!("the key's row in {listing}"))
        .to_owned();
    (key, id)
}

/// Polls (with `key`) until `path` exists in sandbox `id`; false if it never does.
fn appears(server: &Server, key: &str, id: &str, path: &str) -> bool {
    for _ in 0..600 {
        let (code, _) = server.exec(key, id, &["/bin/sh", "-c", &format!("test -e {path}")]);
        if code == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Destroys a sandbox (with a key that stays valid) when dropped, also when the test
/// fails part-way.
struct Destroyed<'a>(&'a Server, &'a str, &'a str);

impl Drop for Destroyed<'_> {
    fn drop(&mut self) {
        let path = format!("/v2/sandboxes/{}", self.2);
        let _ = self.0.try_request("DELETE", &path, self.1, None);
        for _ in 0..600 {
            match self.0.try_request("GET", &path, self.1, None) {
                Ok(r) if r.json()["data"]["status"] != "TERMINATED" => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => return,
            }
        }
    }
}

#[test]
fn a_revoke_ends_inngest_and_openrelay_streams_and_leaves_their_commands() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8");
    let (key, key_id) = team_key(data);
    let (other, _) = team_key(data);
    let server = Server::start(dir.path(), None);
    let id = server.create_sandbox(
        &key,
        &json!({"name": "revoked", "vcpu": 1, "memoryMb": 256}),
    );
    let _destroyed = Destroyed(&server, &other, &id);
    let addr = server.addr;

    let logs = std::thread::spawn({
        let head = format!(
            "GET /v2/sandboxes/{id}/logs?follow=true HTTP/1.1\r\nhost: {addr}\r\n\
             connection: close\r\nauthorization: Bearer {key}\r\n\r\n"
        );
        move || whole_answer(addr, head, String::new())
    });
    let exec_body =
        json!({"command": ["/bin/sh", "-c", waiter("inngest")], "timeout": "5m"}).to_string();
    let exec = std::thread::spawn({
        let head = request_head(
            addr,
            "POST",
            &format!("/v2/sandboxes/{id}/exec"),
            &key,
            &exec_body,
        );
        move || whole_answer(addr, head, exec_body)
    });
    // A process of the key, waited for and its output followed with the key.
    let started = server.request(
        "POST",
        &format!("/v2/sandboxes/{id}/processes"),
        &key,
        Some(&json!({"command": ["/bin/sh", "-c", waiter("process")]})),
    );
    assert_eq!(started.status, 201, "{}", started.text());
    let pid = started.json()["data"]["id"]
        .as_str()
        .expect("process id")
        .to_owned();
    let process = format!("/v2/sandboxes/{id}/processes/{pid}");
    let wait = std::thread::spawn({
        let head = request_head(
            addr,
            "POST",
            &format!("{process}/wait?timeout=5m"),
            &key,
            "",
        );
        move || whole_answer(addr, head, String::new())
    });
    let output = std::thread::spawn({
        let head = format!(
            "GET {process}/output/stream HTTP/1.1\r\nhost: {addr}\r\n\
             connection: close\r\nauthorization: Bearer {key}\r\n\r\n"
        );
        move || whole_answer(addr, head, String::new())
    });
    // A download of a file bigger than the socket buffers, read no further than its
    // head before the revoke.
    let (code, _) = server.exec(
        &other,
        &id,
        &[
            "/bin/sh",
            "-c",
            &format!("head -c {BIG} /dev/zero > /tmp/big"),
        ],
    );
    assert_eq!(code, 0);
    let mut download = TcpStream::connect(addr).expect("connect");
    download
        .set_read_timeout(Some(ENDS_WITHIN))
        .expect("timeout");
    let head = format!(
        "GET /v2/sandboxes/{id}/files?path=/tmp/big HTTP/1.1\r\nhost: {addr}\r\n\
         connection: close\r\nauthorization: Bearer {key}\r\n\r\n"
    );
    download.write_all(head.as_bytes()).expect("send");
    let mut first = [0u8; 12];
    download
        .read_exact(&mut first)
        .expect("the download's head");
    assert_eq!(
        &first,
        b"HTTP/1.1 200",
        "{}",
        String::from_utf8_lossy(&first)
    );
    let run_body = json!({"cmd": waiter("openrelay")}).to_string();
    let openrelay = std::thread::spawn({
        let head = request_head(
            addr,
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            &key,
            &run_body,
        );
        move || whole_answer(addr, head, run_body)
    });
    // Every command runs (so every request is open) before the revoke.
    for name in ["inngest", "openrelay", "process"] {
        assert!(
            appears(&server, &other, &id, &format!("/tmp/{name}.started")),
            "{name}'s command never started"
        );
    }
    let still = server.request("GET", &format!("/v2/sandboxes/{id}"), &key, None);
    assert_eq!(still.status, 200, "{}", still.text());

    cli(&["keys", "revoke", &key_id, "--data-dir", data], "");

    for (what, stream) in [("log", logs), ("process output", output)] {
        let stream = stream
            .join()
            .expect("thread")
            .unwrap_or_else(|| panic!("the followed {what} did not end"));
        assert_eq!(stream.status, 200, "{}", stream.text());
        let last = String::from_utf8_lossy(&stream.body)
            .lines()
            .last()
            .map(str::to_owned)
            .unwrap_or_default();
        let frame: Value = serde_json::from_str(&last).unwrap_or_default();
        assert_eq!(
            (&frame["type"], &frame["error"]["code"]),
            (&json!("error"), &json!("unauthorized")),
            "the followed {what}'s last frame: {last}"
        );
    }
    let wait = wait.join().expect("thread").expect("the wait answered");
    assert_eq!(wait.status, 401, "{}", wait.text());
    // The download stops short of the file (the connection is cut, not the file sent).
    let mut got = Vec::new();
    let _ = download.read_to_end(&mut got);
    assert!(
        got.len() < BIG,
        "the download went on after the revoke: {} bytes",
        got.len()
    );
    let exec = exec.join().expect("thread").expect("the exec answered");
    assert_eq!(exec.status, 401, "{}", exec.text());
    assert_eq!(
        exec.json()["errors"][0]["code"],
        "unauthorized",
        "{}",
        exec.text()
    );
    let run = openrelay
        .join()
        .expect("thread")
        .expect("the exec answered");
    assert!(
        run.text().contains("UNAUTHENTICATED"),
        "OpenRelay exec's answer: {} {}",
        run.status,
        run.text()
    );

    // New requests of the key are refused; the other key still works.
    let refused = server.request("GET", &format!("/v2/sandboxes/{id}"), &key, None);
    assert_eq!(refused.status, 401, "{}", refused.text());
    // The commands were not killed: they finish their work once told to.
    server.exec(&other, &id, &["/bin/touch", "/tmp/go"]);
    for name in ["inngest", "openrelay", "process"] {
        assert!(
            appears(&server, &other, &id, &format!("/tmp/{name}.ran-on")),
            "{name}'s command was killed by the revoke"
        );
    }
}

/// Makes a Runzivo key of the test tenant; returns it and its id.
fn runzivo_key(s: &runzivo_api::Server) -> (String, String) {
    use sandboxd_engine::accounts::Accounts;
    let store = sandboxd_store::SqliteStore::open(s.data_dir().join("sandboxd.db")).expect("store");
    let accounts = Accounts::new(&store);
    let ws = accounts
        .workspace_by_alias("runzivo", runzivo_api::TENANT)
        .expect("store")
        .expect("the tenant");
    let key = accounts
        .create_key(Some(&ws.id), vec!["sandboxes:write".into()], vec![])
        .expect("key");
    let id = accounts
        .list_keys(Some(&ws.id))
        .expect("keys")
        .into_iter()
        .find(|k| key.starts_with(&k.prefix))
        .expect("the key's row")
        .id;
    (key, id.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoke_ends_runzivo_execs_and_terminals_and_refuses_their_tickets() {
    let s = runzivo_api::Server::start(30);
    let (key, key_id) = runzivo_key(&s);
    let id = s.create().await;

    let body = json!({"cmd": waiter("runzivo")}).to_string();
    let exec_path = s.path(&format!("/{id}/exec"));
    let exec = s
        .open(
            "POST",
            &exec_path,
            Some(&key),
            Some("application/json"),
            body,
        )
        .await;
    assert_eq!(exec.status(), 200);
    let exec = tokio::spawn(tokio::time::timeout(ENDS_WITHIN, async move {
        exec.into_body().collect().await.map(|b| b.to_bytes())
    }));

    let tickets = s.path(&format!("/{id}/terminal/tickets"));
    let mut bought = Vec::new();
    for _ in 0..2 {
        let issued = s.call("POST", &tickets, Some(&key), None, "").await;
        assert_eq!(issued.status, 201, "{}", issued.json());
        bought.push(issued.json()["ticket"].as_str().expect("ticket").to_owned());
    }
    let terminal = |ticket: &str| {
        format!(
            "ws://{}{}?ticket={ticket}",
            s.addr,
            s.path(&format!("/{id}/terminal"))
        )
    };
    let (mut ws, _) = tokio_tungstenite::connect_async(terminal(&bought[0]))
        .await
        .expect("terminal");
    ws.send(Message::Binary("echo open-$((6*7))\n".into()))
        .await
        .expect("send");
    let mut seen = String::new();
    while !seen.contains("open-42") {
        match tokio::time::timeout(ENDS_WITHIN, ws.next()).await {
            Ok(Some(Ok(Message::Binary(d)))) => seen.push_str(&String::from_utf8_lossy(&d)),
            other => panic!("the terminal before the revoke: {other:?} after {seen:?}"),
        }
    }
    let started = s
        .sh(&id, "test -e /tmp/runzivo.started && echo yes || echo no")
        .await;
    let mut started = started.trim() == "yes";
    for _ in 0..600 {
        if started {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        started = s
            .sh(&id, "test -e /tmp/runzivo.started && echo yes || echo no")
            .await
            .trim()
            == "yes";
    }
    assert!(started, "the streamed command never started");

    let revoke = std::process::Command::new(serve_bin::BIN)
        .args(["keys", "revoke", &key_id, "--data-dir"])
        .arg(s.data_dir())
        .output()
        .expect("sandboxd keys revoke");
    assert!(
        revoke.status.success(),
        "{}",
        String::from_utf8_lossy(&revoke.stderr)
    );

    // The streamed exec ends with an exit line whose reason says why.
    let body = exec
        .await
        .expect("task")
        .expect("the streamed exec ended")
        .expect("its body");
    let lines = runzivo_api::ndjson(&body);
    let last = lines.last().cloned().unwrap_or_default();
    assert_eq!(
        (&last["type"], &last["reason"], &last["exit_code"]),
        (&json!("exit"), &json!("key_revoked"), &json!(-1)),
        "{lines:?}"
    );
    // The terminal closes with a policy-violation close frame.
    let close = loop {
        match tokio::time::timeout(ENDS_WITHIN, ws.next()).await {
            Ok(Some(Ok(Message::Binary(_)))) => continue,
            Ok(Some(Ok(Message::Close(frame)))) => break frame,
            other => panic!("the terminal after the revoke: {other:?}"),
        }
    };
    let close = close.expect("a close frame");
    assert_eq!(u16::from(close.code), 1008, "{close:?}");
    // The ticket it bought before the revoke is refused, as are new requests.
    match tokio_tungstenite::connect_async(terminal(&bought[1])).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status().as_u16(), 401)
        }
        other => panic!("a revoked key's ticket: {:?}", other.map(|_| ())),
    }
    s.call("POST", &tickets, Some(&key), None, "")
        .await
        .expect(401, "unauthorized");
    // The command was not killed: it finishes its work once told to.
    s.sh(&id, "touch /tmp/go").await;
    let mut ran_on = false;
    for _ in 0..600 {
        ran_on = s
            .sh(&id, "test -e /tmp/runzivo.ran-on && echo yes || echo no")
            .await
            .trim()
            == "yes";
        if ran_on {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ran_on, "the streamed command was killed by the revoke");
}
