//! Headless Chromium for tests: Debian's `chromedriver` on a free loopback port, a
//! WebDriver session (fantoccini) with a temporary profile, and a cleanup that ends
//! exactly the processes this session started (chromedriver by its PID, Chromium by the
//! PIDs whose command line names our profile directory) and removes the profile and
//! Chromium's own temporary files (its `TMPDIR` is a directory of ours), also when a
//! failed test unwinds.

#![allow(dead_code)]

use fantoccini::{Client, ClientBuilder};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// A running chromedriver with one browser session.
/// Dropping it (a failed assertion too) kills what is left; [`Browser::close`] first
/// ends the session politely.
pub struct Browser {
    pub client: Client,
    driver: Child,
    /// Holds `profile/` (the user data dir) and `tmp/` (Chromium's `TMPDIR`: its
    /// `org.chromium.Chromium.*` singleton dirs, which a killed Chromium leaves).
    root: tempfile::TempDir,
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium of `width`×`height`.
    pub async fn start(width: u32, height: u32) -> Browser {
        for bin in [CHROMEDRIVER, CHROMIUM] {
            assert!(
                Path::new(bin).exists(),
                "{bin} is missing: scripts/setup.sh installs Debian's chromium and chromium-driver"
            );
        }
        let root = tempfile::Builder::new()
            .prefix("sandboxd-console-chromium-")
            .tempdir()
            .expect("browser temp dir");
        let (profile, tmp) = (root.path().join("profile"), root.path().join("tmp"));
        for dir in [&profile, &tmp] {
            std::fs::create_dir(dir).expect("browser temp subdir");
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .env("TMPDIR", &tmp)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut caps = serde_json::Map::new();
        let args = [
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(), // root in a test container
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-extensions".to_owned(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.display()),
        ];
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({"binary": CHROMIUM, "args": args}),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let mut builder = ClientBuilder::new(connector);
        builder.capabilities(caps);
        let client = builder.connect(&format!("http://{addr}")).await;
        let browser = Browser {
            client: match client {
                Ok(c) => c,
                Err(e) => {
                    let mut driver = driver;
                    let _ = driver.kill();
                    let _ = driver.wait();
                    panic!("cannot start a Chromium session: {e}");
                }
            },
            driver,
            root,
        };
        browser.client.set_window_size(width, height).await.ok();
        browser
    }

    /// Ends the session (Chromium quits), then anything of ours that is left.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }

    /// Saves a PNG of the page to `dir/name.png`.
    pub async fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        cleanup(&mut self.driver, self.root.path());
    }
}

/// Kills the Chromium processes whose command line names a path under `root` (only
/// ours), then chromedriver by its PID; dropping `root` then removes the files.
fn cleanup(driver: &mut Child, root: &Path) {
    let needle = root.to_string_lossy().into_owned();
    for _ in 0..50 {
        let ours = processes_naming(&needle);
        if ours.is_empty() {
            break;
        }
        for pid in ours {
            // SAFETY: kill(2) of a PID whose command line names our own temporary
            // profile directory: a Chromium process this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = driver.kill();
    let _ = driver.wait();
}

fn processes_naming(needle: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}
