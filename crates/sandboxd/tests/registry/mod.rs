//! A real registry for the images tests: Debian's `docker-registry` on a loopback port
//! (storage in a temp dir, optionally behind htpasswd auth), the layouts
//! `images_data/make_layouts.py` writes, pushed with `skopeo`, and the `sandboxd` tools.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// A registry the test started; killed (by its PID) when dropped.
pub struct Registry {
    child: Child,
    pub port: u16,
    pub root: PathBuf,
    /// The registry's own log (its access log lists every request).
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    pub fn start() -> Registry {
        Self::start_with(None)
    }

    /// A registry that wants `user`/`password` (htpasswd, bcrypt by apache2-utils).
    pub fn start_with_auth(user: &str, password: &str) -> Registry {
        Self::start_with(Some((user, password)))
    }

    fn start_with(auth: Option<(&str, &str)>) -> Registry {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let root = dir.path().join("storage");
        let config = dir.path().join("config.yml");
        let mut text = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            root.display()
        );
        if let Some((user, password)) = auth {
            let line = run(Command::new("htpasswd").args(["-nbB", user, password]));
            let file = dir.path().join("htpasswd");
            std::fs::write(&file, line.trim()).expect("htpasswd");
            text.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                file.display()
            ));
        }
        std::fs::write(&config, text).expect("config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("docker-registry (apt-get install docker-registry)");
        let registry = Registry {
            child,
            port,
            root,
            log: dir.path().join("registry.log"),
            _dir: dir,
        };
        for _ in 0..600 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return registry;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the registry did not start listening");
    }

    pub fn reference(&self, name: &str) -> String {
        format!("127.0.0.1:{}/{name}", self.port)
    }

    pub fn push_layout(&self, layout: &Path, name: &str) {
        self.push_layout_as(layout, name, None);
    }

    /// Pushes with `user:password` credentials when given.
    pub fn push_layout_as(&self, layout: &Path, name: &str, creds: Option<&str>) {
        let mut cmd = Command::new("skopeo");
        cmd.args(["copy", "--dest-tls-verify=false"]);
        if let Some(creds) = creds {
            cmd.args(["--dest-creds", creds]);
        }
        run(cmd.args([
            &format!("oci:{}:v1", layout.display()),
            &format!("docker://{}", self.reference(name)),
        ]));
    }

    /// How many `GET` requests for blob `digest` the registry's access log shows.
    pub fn blob_gets(&self, digest: &str) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let needle = format!("/blobs/{digest}");
        log.lines()
            .filter(|l| l.contains("\"GET ") && l.contains(&needle))
            .count()
    }
}

pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn sandboxd(data_dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("sandboxd")
}

/// Layouts made by the script in `work`; `outside` is the host dir hostile layers aim at.
pub fn layouts(work: &Path, outside: &Path) -> PathBuf {
    let out = work.join("layouts");
    std::fs::create_dir_all(&out).expect("mkdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images_data/make_layouts.py");
    run(Command::new("python3").arg(script).arg(&out).arg(outside));
    out
}

/// A temporary work directory with an `outside` directory that hostile layers aim at,
/// and the test layouts built into it.
pub fn test_layouts() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let work = tempfile::tempdir().expect("tempdir");
    let outside = work.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    let layouts = layouts(work.path(), &outside);
    (work, outside, layouts)
}

/// The `big` layout (four layers of 16 MiB of random data) in `work`.
pub fn big_layout(work: &Path) -> PathBuf {
    random_layout(work, "big-layouts", 16)
}

/// A layout of four layers of `mib` MiB of fresh random data each, in `work/dir`.
pub fn random_layout(work: &Path, dir: &str, mib: u32) -> PathBuf {
    let out = work.join(dir);
    std::fs::create_dir_all(&out).expect("mkdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images_data/make_layouts.py");
    run(Command::new("python3")
        .arg(script)
        .arg(&out)
        .arg(work)
        .arg("big")
        .arg(mib.to_string()));
    out.join("big")
}

/// Entries of `data`'s layer store that are not stored layers or blob locks: scratch,
/// owner files.
pub fn layer_store_leftovers(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("layers"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with('.') && !n.starts_with(".lock-"))
        .collect()
}

/// The layer digests of `reference`'s manifest in the registry.
pub fn manifest_layers(reference: &str) -> Vec<String> {
    let raw = run(Command::new("skopeo").args([
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{reference}"),
    ]));
    let manifest: serde_json::Value = serde_json::from_str(&raw).expect("manifest json");
    manifest["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(|l| l["digest"].as_str().expect("digest").to_owned())
        .collect()
}
