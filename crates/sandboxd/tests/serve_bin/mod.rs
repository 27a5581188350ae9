//! The one helper that starts the real `sandboxd serve` binary on a loopback port 0,
//! plus a minimal blocking HTTP/1.1 client and a runner for the binary's tool commands.

#![allow(dead_code)]

// A test taking both fixtures loads this twice: each fixture stands on its own.
#[allow(clippy::duplicate_mod)]
#[path = "../server_log/mod.rs"]
mod server_log;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_sandboxd");

/// A running `sandboxd serve`; stopped with SIGTERM when dropped (a server's stop leaves
/// its sandboxes running, so a test that panics first has its default workspace's
/// sandboxes destroyed: a failed test must not leave sandboxes behind).
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    master: Option<String>,
    /// Every line the server logged so far.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `serve` on `data_dir` (master key `master` when given) and waits for its
    /// `listening on ADDR` line; the rest of its log goes to this test's stderr.
    pub fn start(data_dir: &Path, master: Option<&str>) -> Server {
        Self::start_with_env(data_dir, master, &[])
    }

    /// [`Server::start`] with extra environment variables (e.g. `SANDBOXD_MAX_*`).
    pub fn start_with_env(data_dir: &Path, master: Option<&str>, env: &[(&str, &str)]) -> Server {
        Self::start_with(data_dir, master, env, |_| {})
    }

    /// [`Server::start_with_env`], with `configure` given the command last (e.g. to
    /// hand the server an extra descriptor).
    pub fn start_with(
        data_dir: &Path,
        master: Option<&str>,
        env: &[(&str, &str)],
        configure: impl FnOnce(&mut Command),
    ) -> Server {
        let mut cmd = Command::new(BIN);
        // Tests share the host's disk and write little: disk admission (tested on a
        // small filesystem of its own in full_disk.rs) must not refuse their sandboxes.
        cmd.env("SANDBOXD_DISK_OVERCOMMIT", "1000");
        // No metrics listener unless a test asks for one (on a port of its own): the
        // default 127.0.0.1:9464 is one port for every server of the host.
        cmd.env("SANDBOXD_METRICS_LISTEN", "none");
        // The pool at its base size (2) unless a test asks: most tests count entries,
        // and 20 started ahead per server would only slow the suite.
        cmd.env("SANDBOXD_WARM_INITS_START", "0");
        cmd.envs(env.iter().copied());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .env_remove("SANDBOXD_MASTER_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(key) = master {
            cmd.env("SANDBOXD_MASTER_KEY", key);
        }
        configure(&mut cmd);
        let mut child = cmd.spawn().expect("spawn sandboxd serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[serve] {line}");
                if let Some(addr) = listening_addr(&line) {
                    let _ = tx.send(addr);
                }
                lines.lock().unwrap().push(line);
            }
        });
        match rx.recv() {
            Ok(addr) => Server {
                child,
                addr,
                master: master.map(str::to_owned),
                log,
            },
            Err(_) => {
                let status = child.wait().expect("wait for serve");
                panic!("sandboxd serve exited before listening: {status}");
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The server's resident memory in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }

    /// The lines the server logged so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits until a logged line satisfies `found` (for lines logged after an answer,
    /// such as a request's own log line); gives up after a minute.
    pub fn wait_for_line(&self, found: impl Fn(&str) -> bool) -> String {
        server_log::wait_for_line(&self.log, found)
    }

    /// SIGKILL: no graceful shutdown at all.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn request(&self, method: &str, path: &str, key: &str, body: Option<&Value>) -> Reply {
        self.try_request(method, path, key, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// [`Server::request`], with a connection that fails as an error instead of a panic
    /// (for cleanup guards, which must not panic while a failed test unwinds).
    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        key: &str,
        body: Option<&Value>,
    ) -> std::io::Result<Reply> {
        let body = body.map(|b| b.to_string());
        let mut headers = vec![("authorization", format!("Bearer {key}"))];
        if body.is_some() {
            headers.push(("content-type", "application/json".into()));
        }
        try_http(
            self.addr,
            method,
            path,
            &headers,
            body.as_deref().unwrap_or(""),
        )
    }

    /// Creates a sandbox and returns its id once it answers (Create returns RUNNING).
    pub fn create_sandbox(&self, key: &str, body: &Value) -> String {
        let reply = self.request("POST", "/v2/sandboxes", key, Some(body));
        assert_eq!(reply.status, 201, "{}", reply.text());
        let data = &reply.json()["data"];
        assert_eq!(data["status"], "RUNNING", "{data}");
        data["id"].as_str().expect("id").to_owned()
    }

    /// Runs `command` with captured exec; returns (exit code, decoded stdout).
    pub fn exec(&self, key: &str, id: &str, command: &[&str]) -> (i64, String) {
        let body = serde_json::json!({ "command": command });
        let reply = self.request(
            "POST",
            &format!("/v2/sandboxes/{id}/exec"),
            key,
            Some(&body),
        );
        assert_eq!(reply.status, 200, "{}", reply.text());
        let data = &reply.json()["data"];
        let stdout = data["stdout"].as_str().unwrap_or_default();
        let stdout = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, stdout)
            .expect("base64 stdout");
        let code = data["exitCode"].as_i64().expect("exitCode");
        (code, String::from_utf8_lossy(&stdout).into_owned())
    }

    /// Destroys a sandbox and polls `get` until it is TERMINATED.
    pub fn destroy(&self, key: &str, id: &str) {
        let path = format!("/v2/sandboxes/{id}");
        let reply = self.request("DELETE", &path, key, None);
        assert!(matches!(reply.status, 202 | 204), "{}", reply.text());
        loop {
            let status = self.request("GET", &path, key, None).json()["data"]["status"].clone();
            if status == "TERMINATED" {
                return;
            }
            assert!(status == "TERMINATING" || status == "RUNNING", "{status}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Server {
    /// Destroys, best effort and without panicking, every sandbox of the master key's
    /// workspace, waiting up to 20 s for them to end.
    fn destroy_all_quietly(&self) {
        let Some(key) = self.master.as_deref() else {
            return;
        };
        let ids = |s: &Server| -> Vec<String> {
            let Ok(list) = s.try_request("GET", "/v2/sandboxes", key, None) else {
                return Vec::new();
            };
            let data = list.json()["data"].clone();
            data.as_array()
                .into_iter()
                .flatten()
                .filter(|sb| sb["status"] != "TERMINATED")
                .filter_map(|sb| sb["id"].as_str().map(str::to_owned))
                .collect()
        };
        for id in ids(self) {
            let _ = self.try_request("DELETE", &format!("/v2/sandboxes/{id}"), key, None);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !ids(self).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if std::thread::panicking() {
                self.destroy_all_quietly();
            }
            // SAFETY: kill(2) on the PID of our own, not yet reaped, child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
        }
    }
}

/// The address of a `listening on ADDR` log line (text or JSON).
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on ").nth(1)?;
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || ".:[]".contains(*c))
        .collect();
    addr.parse().ok()
}

/// An HTTP answer with the body decoded (chunked or not).
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request on a fresh connection (`Connection: close`), read to the end.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> Reply {
    try_http(addr, method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// [`http`], with an I/O failure or a cut-short answer as an error.
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> std::io::Result<Reply> {
    let mut conn = TcpStream::connect(addr)?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    conn.write_all(body.as_bytes())?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw)?;
    if !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the answer ended before its head did",
        ));
    }
    Ok(parse_response(&raw))
}

/// A raw HTTP/1.1 answer, parsed (a chunked body de-chunked).
pub fn parse_response(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .expect("chunk size");
        if size == 0 {
            break;
        }
        let start = eol + 2;
        body.extend_from_slice(&rest[start..start + size]);
        rest = &rest[start + size + 2..];
    }
    body
}

/// Runs `sandboxd ARGS…` with `stdin` as its input; fails the test if it fails.
pub fn cli(args: &[&str], stdin: &str) -> Output {
    let out = cli_status(args, stdin);
    assert!(
        out.status.success(),
        "sandboxd {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `sandboxd ARGS…` and returns whatever it did.
pub fn cli_status(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("SANDBOXD_DATA_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sandboxd");
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("wait for sandboxd")
}

/// Waits until every `sandboxd run` on `data` has finished the teardown it goes on with
/// after returning (each run's worker holds a lock on its sandbox's owner mark,
/// `data/sandboxes/<id>.run-owner`, until then); returns the marks left by runs that
/// died before finishing (none held).
pub fn wait_for_runs(data: &Path) -> Vec<std::path::PathBuf> {
    wait_for_runs_but(data, None)
}

/// [`wait_for_runs`], not waiting on mark `held` (one this test holds itself).
pub fn wait_for_runs_but(data: &Path, held: Option<&Path>) -> Vec<std::path::PathBuf> {
    use nix::fcntl::{Flock, FlockArg};
    loop {
        let marks: Vec<_> = std::fs::read_dir(data.join("sandboxes"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| {
                        let name = p.file_name().unwrap().to_string_lossy();
                        !name.starts_with('.') && name.ends_with(".run-owner")
                    })
                    .filter(|p| Some(p.as_path()) != held)
                    .collect()
            })
            .unwrap_or_default();
        let mut dead = Vec::new();
        let mut waited = false;
        for mark in marks {
            let Ok(file) = std::fs::File::open(&mark) else {
                continue;
            };
            let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(held) => held,
                Err((file, _)) => {
                    // Blocks until the run's worker ends its teardown.
                    waited = true;
                    let _ = Flock::lock(file, FlockArg::LockExclusive);
                    continue;
                }
            };
            if mark.exists() {
                dead.push(mark);
            }
            drop(file);
        }
        if !waited {
            return dead;
        }
    }
}

/// Whether the server closed `conn` (EOF or reset) within `within`; an answer before
/// the close counts.
pub fn closed_by_server(conn: &mut TcpStream, within: std::time::Duration) -> bool {
    conn.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 512];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // an answer before the close
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// The resident memory of process `pid` in KiB (`VmRSS`).
pub use server_log::rss_kib;

#[cfg(test)]
mod tests {
    #[test]
    fn parses_the_listening_line() {
        let line = "2026-11-30T15:00:00Z  INFO sandboxd_server::serve: listening on 127.0.0.1:4321";
        assert_eq!(
            super::listening_addr(line),
            Some("127.0.0.1:4321".parse().unwrap())
        );
        let json = r#"{"timestamp":"…","level":"INFO","message":"listening on 127.0.0.1:4321","target":"sandboxd_server::serve"}"#;
        assert_eq!(
            super::listening_addr(json),
            Some("127.0.0.1:4321".parse().unwrap())
        );
    }
}
