//! One helper for the Runzivo dialect's tests: a real `sandboxd serve` on a loopback
//! port 0 over a fresh data directory with tenants and keys made through the engine's
//! accounts API, an HTTP/1.1 client (whole or streamed answers), and cleanup on drop.

#![allow(dead_code)]

// A test taking both fixtures loads this twice: each fixture stands on its own.
#[allow(clippy::duplicate_mod)]
#[path = "../server_log/mod.rs"]
mod server_log;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::Request;
use sandboxd_engine::accounts::Accounts;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

pub const MASTER: &str = "runzivo-test-master-key";
pub const TENANT: &str = "t_acme";
pub const OTHER_TENANT: &str = "t_other";

/// Keys made before the server starts.
pub struct Keys {
    pub writer: String,
    pub reader: String,
    pub none: String,
    pub all_scope: String,
    pub all_scope_reader: String,
    pub other_scope: String,
    pub other_tenant: String,
}

/// A running `sandboxd serve`; its sandboxes are deleted and it is stopped on drop.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    pub keys: Keys,
    created: Mutex<Vec<String>>,
    /// Every line the server logged so far.
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

/// A whole answer.
pub struct Reply {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Asserts an error answer in the dialect's shape.
    pub fn expect(&self, status: u16, code: &str) {
        let v = self.json();
        assert_eq!(
            (self.status, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{v}"
        );
    }

    /// The NDJSON lines of a 200 exec answer.
    pub fn lines(&self) -> Vec<Value> {
        assert_eq!(
            self.status,
            200,
            "{:?}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(self.headers["content-type"], "application/x-ndjson");
        assert!(self.body.ends_with(b"\n"));
        ndjson(&self.body)
    }
}

/// The JSON values of NDJSON text (one per non-empty line).
pub fn ndjson(raw: &[u8]) -> Vec<Value> {
    raw.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("one JSON value per line"))
        .collect()
}

fn make_keys(dir: &std::path::Path) -> Keys {
    let store = sandboxd_store::SqliteStore::open(dir.join("sandboxd.db")).expect("store");
    let accounts = Accounts::new(&store);
    let acme = accounts
        .create_workspace("Acme", [("runzivo".into(), TENANT.into())].into())
        .expect("workspace");
    let other = accounts
        .create_workspace("Other", [("runzivo".into(), OTHER_TENANT.into())].into())
        .expect("workspace");
    let key = |ws: &str, perms: &[&str], scopes: &[&str]| {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        accounts
            .create_key(Some(ws), v(perms), v(scopes))
            .expect("key")
    };
    Keys {
        writer: key(&acme.id, &["sandboxes:write"], &[]),
        reader: key(&acme.id, &["sandboxes:read"], &[]),
        none: key(&acme.id, &["secrets:write"], &[]),
        all_scope: key(&acme.id, &["sandboxes:write"], &["all:all"]),
        all_scope_reader: key(&acme.id, &["sandboxes:read"], &["all:all"]),
        other_scope: key(&acme.id, &["sandboxes:write"], &["deployments:read"]),
        other_tenant: key(&other.id, &["sandboxes:write"], &[]),
    }
}

impl Server {
    /// Starts `serve` with the given kill grace after an exec timeout.
    pub fn start(grace_seconds: u64) -> Server {
        Self::start_with_env(grace_seconds, &[])
    }

    /// [`Server::start`] with extra environment variables (e.g. `SANDBOXD_CREATE_RATE_*`).
    pub fn start_with_env(grace_seconds: u64, env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let keys = make_keys(dir.path());
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("SANDBOXD_MASTER_KEY", MASTER)
            .env(
                "SANDBOXD_EXEC_KILL_GRACE_SECONDS",
                grace_seconds.to_string(),
            )
            .env("NO_COLOR", "1")
            // Tests share the host's disk and write little (see full_disk.rs).
            .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
            .env("SANDBOXD_METRICS_LISTEN", "none")
            // The warm pool at its base size (see serve_bin's Server).
            .env("SANDBOXD_WARM_INITS_START", "0")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sandboxd serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[serve] {line}");
                kept.lock().unwrap().push(line.clone());
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let _ = tx.send(addr.trim().parse::<SocketAddr>());
                }
            }
        });
        let addr = match rx.recv() {
            Ok(Ok(addr)) => addr,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("sandboxd serve did not start listening");
            }
        };
        Server {
            child,
            addr,
            keys,
            created: Mutex::new(Vec::new()),
            log,
            _dir: dir,
        }
    }

    /// Waits until a logged line satisfies `found` (for lines logged after an answer,
    /// such as a request's own log line); gives up after a minute.
    pub fn wait_for_line(&self, found: impl Fn(&str) -> bool) -> String {
        server_log::wait_for_line(&self.log, found)
    }

    /// The lines the server logged so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The server's resident memory in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        server_log::rss_kib(self.child.id() as i32)
    }

    /// The server's data directory (for the store tools, e.g. `sandboxd quota`).
    pub fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    pub fn path(&self, rest: &str) -> String {
        format!("/v1/customer/tenants/{TENANT}/sandboxes{rest}")
    }

    /// Sends a request and returns the answer's head and streamed body.
    pub async fn open(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> hyper::Response<Incoming> {
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .expect("connect");
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .expect("handshake");
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "sandboxd");
        if let Some(key) = key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let req = req.body(Full::new(body.into())).expect("request");
        sender.send_request(req).await.expect("send request")
    }

    pub async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> Reply {
        let response = self.open(method, path, key, content_type, body).await;
        let (head, body) = response.into_parts();
        let body = body.collect().await.expect("read body").to_bytes();
        Reply {
            status: head.status.as_u16(),
            headers: head.headers,
            body,
        }
    }

    /// A JSON request with the writer key.
    pub async fn json(&self, method: &str, path: &str, body: &Value) -> Reply {
        let body = body.to_string();
        self.call(
            method,
            path,
            Some(&self.keys.writer),
            Some("application/json"),
            body,
        )
        .await
    }

    /// Creates a sandbox in the test tenant; deleted again when the server is dropped.
    pub async fn create(&self) -> String {
        let reply = self
            .call("POST", &self.path(""), Some(&self.keys.writer), None, "")
            .await;
        self.created(reply)["id"].as_str().expect("id").to_owned()
    }

    /// Creates a sandbox with a JSON `body` and returns its view; deleted again when
    /// the server is dropped.
    pub async fn create_with(&self, body: &Value) -> Value {
        let reply = self.json("POST", &self.path(""), body).await;
        self.created(reply)
    }

    fn created(&self, reply: Reply) -> Value {
        assert_eq!(reply.status, 201, "{}", reply.json());
        let view = reply.json();
        let id = view["id"].as_str().expect("id").to_owned();
        self.created.lock().unwrap().push(id);
        view
    }

    /// Runs `cmd` (other fields from `extra`) and returns the NDJSON lines.
    pub async fn exec(&self, id: &str, cmd: &str, extra: Value) -> Vec<Value> {
        let mut body = serde_json::json!({ "cmd": cmd });
        if let (Some(b), Value::Object(more)) = (body.as_object_mut(), extra) {
            b.extend(more);
        }
        self.json("POST", &self.path(&format!("/{id}/exec")), &body)
            .await
            .lines()
    }

    /// A terminal on sandbox `id` over a WebSocket (a ticket bought with the writer key;
    /// `query` adds e.g. `&cols=100`).
    pub async fn terminal(
        &self,
        id: &str,
        query: &str,
    ) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>
    {
        let tickets = self.path(&format!("/{id}/terminal/tickets"));
        let issued = self
            .call("POST", &tickets, Some(&self.keys.writer), None, "")
            .await;
        assert_eq!(issued.status, 201, "{}", issued.json());
        let ticket = issued.json()["ticket"].as_str().expect("ticket").to_owned();
        let path = self.path(&format!("/{id}/terminal"));
        let url = format!("ws://{}{path}?ticket={ticket}{query}", self.addr);
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("terminal");
        ws
    }

    /// Stdout of a command that must exit 0.
    pub async fn sh(&self, id: &str, cmd: &str) -> String {
        let lines = self.exec(id, cmd, Value::Null).await;
        let (out, exit) = collect(&lines);
        assert_eq!(exit["exit_code"], 0, "{cmd}: {lines:?}");
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A blocking request for cleanup (no async runtime needed).
    fn blocking(&self, method: &str, path: &str) {
        let Ok(mut conn) = std::net::TcpStream::connect(self.addr) else {
            return;
        };
        let _ = write!(
            conn,
            "{method} {path} HTTP/1.1\r\nHost: sandboxd\r\nAuthorization: Bearer {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            self.keys.writer
        );
        let mut sink = Vec::new();
        let _ = conn.read_to_end(&mut sink);
    }
}

/// Decoded stdout+stderr bytes in order, and the exit line (which must be last, once).
pub fn collect(lines: &[Value]) -> (Vec<u8>, Value) {
    use base64::Engine;
    let (exit, output) = lines.split_last().expect("at least the exit line");
    assert_eq!(exit["type"], "exit", "{lines:?}");
    let mut bytes = Vec::new();
    for line in output {
        assert!(
            line["type"] == "stdout" || line["type"] == "stderr",
            "{line}"
        );
        let data = line["data"].as_str().expect("data");
        bytes.extend(
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .expect("base64"),
        );
    }
    (bytes, exit.clone())
}

impl Drop for Server {
    fn drop(&mut self) {
        let ids = std::mem::take(&mut *self.created.lock().unwrap_or_else(|e| e.into_inner()));
        for id in ids {
            self.blocking("DELETE", &self.path(&format!("/{id}")));
        }
        // SAFETY: plain kill(2) of the child this helper started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}
