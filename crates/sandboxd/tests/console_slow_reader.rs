//! A fast writer and a slow reader on the console's terminal (a WebSocket behind a
//! session cookie), over a real socket to the real server: every byte arrives in order
//! exactly once, and the server's memory stays bounded while the reader lags.

mod serve_bin;
mod terminal_reader;

use serve_bin::{http, Server, BIN};
use terminal_reader::{sha, Pace, FILE};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const MASTER: &str = "console-slow-reader-master-key";

/// A signed-in session: its cookie (`name=value`) and CSRF token.
fn sign_in(dir: &std::path::Path, server: &Server) -> (String, String) {
    let url = format!("http://{}", server.addr);
    let out = std::process::Command::new(BIN)
        .args(["console", "link", "--data-dir"])
        .arg(dir)
        .args(["--url", &url])
        .output()
        .expect("run console link");
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).expect("utf-8");
    let path = printed.trim().strip_prefix(&url).expect("link path");
    let login = http(server.addr, "GET", path, &[], "");
    assert_eq!(login.status, 200, "{}", login.text());
    let cookie = login.header("set-cookie").expect("cookie");
    let cookie = cookie.split(';').next().expect("name=value").to_owned();
    let session = http(
        server.addr,
        "GET",
        "/console/api/session",
        &[("cookie", cookie.clone())],
        "",
    );
    let csrf = session.json()["csrf_token"]
        .as_str()
        .expect("csrf")
        .to_owned();
    (cookie, csrf)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_console_terminal_reader_gets_every_byte() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_with_env(dir.path(), Some(MASTER), &[("SANDBOXD_NETWORK", "none")]);
    let body = serde_json::json!({"name": "console-slow", "vcpu": 1, "memoryMb": 256});
    let id = server.create_sandbox(MASTER, &body);
    let (cookie, csrf) = sign_in(dir.path(), &server);
    let tickets = format!("/console/api/sandboxes/{id}/terminal/tickets");
    let headers = [("cookie", cookie.clone()), ("x-csrf-token", csrf)];
    let issued = http(server.addr, "POST", &tickets, &headers, "");
    assert_eq!(issued.status, 201, "{}", issued.text());
    let ticket = issued.json()["ticket"].as_str().expect("ticket").to_owned();
    let url = format!(
        "ws://{}/console/api/sandboxes/{id}/terminal?ticket={ticket}",
        server.addr
    );
    let mut req = url.into_client_request().expect("request");
    req.headers_mut()
        .insert("cookie", cookie.parse().expect("header"));
    let (mut ws, _) = tokio_tungstenite::connect_async(req)
        .await
        .expect("terminal");
    let before = server.rss_kib();
    // About 2 MiB of base64, far past the PTY's and the socket's buffers.
    let rss = || server.rss_kib();
    let read = terminal_reader::send_and_read(&mut ws, 1572864, Pace::Slow { rss: &rss }).await;
    let peak = read.peak_kib;
    eprintln!("server RSS {before} KiB before, peak {peak} KiB while the reader lagged");
    assert!(peak < before + 300 * 1024, "{peak} KiB");
    let got = &read.got;
    let _ = ws.close(None).await;
    let (code, out) = server.exec(
        MASTER,
        &id,
        &[
            "/bin/sh",
            "-c",
            &format!("wc -c < {FILE}; sha256sum {FILE}"),
        ],
    );
    assert_eq!(code, 0, "{out}");
    let mut words = out.split_whitespace();
    let total: usize = words.next().expect("length").parse().expect("number");
    let sum = words.next().expect("sum");
    assert_eq!(got.len(), total, "bytes lost or doubled in the terminal");
    assert_eq!(sha(got), sum);
    server.destroy(MASTER, &id);
}
