//! A real registry for the images tests: Debian's `docker-registry` on a loopback port
//! (storage in a temp dir, optionally behind htpasswd auth), the layouts
//! `images_data/make_layouts.py` writes, pushed with `skopeo`, and the `sandboxd` tools.

#![allow(dead_code)]

pub mod proxy;
pub mod small_disk;
pub mod token;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// A registry the test started; killed (by its PID) when dropped.
pub struct Registry {
    child: Child,
    config: PathBuf,
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

    /// A registry that wants bearer tokens from `tokens` (the token auth of the
    /// distribution spec: a 401 challenge naming the token server's realm).
    pub fn start_with_tokens(tokens: &token::TokenServer) -> Registry {
        Self::start_configured(|_| {
            format!(
            "auth:\n  token:\n    realm: {}\n    service: {}\n    issuer: {}\n    rootcertbundle: {}\n",
            tokens.realm(),
            token::SERVICE,
            token::ISSUER,
            tokens.cert.display()
        )
        })
    }

    fn start_with(auth: Option<(&str, &str)>) -> Registry {
        Self::start_configured(|dir| {
            let Some((user, password)) = auth else {
                return String::new();
            };
            let line = run(Command::new("htpasswd").args(["-nbB", user, password]));
            let file = dir.join("htpasswd");
            std::fs::write(&file, line.trim()).expect("htpasswd");
            format!(
                "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                file.display()
            )
        })
    }

    /// A registry whose configuration ends with what `extra` returns (YAML at the top
    /// level), given the registry's own directory.
    fn start_configured(extra: impl FnOnce(&Path) -> String) -> Registry {
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
        text.push_str(&extra(dir.path()));
        std::fs::write(&config, text).expect("config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("log");
        let child = serve(&config, log);
        let registry = Registry {
            child,
            config,
            port,
            root,
            log: dir.path().join("registry.log"),
            _dir: dir,
        };
        registry.wait_listening();
        registry
    }

    fn wait_listening(&self) {
        for _ in 0..600 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the registry did not start listening");
    }

    /// Kills the registry process (SIGKILL, by its PID) and reaps it: it goes away.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the registry again on its port, with the same storage and configuration.
    pub fn restart(&mut self) {
        self.kill();
        let log = std::fs::File::options()
            .append(true)
            .open(&self.log)
            .expect("log");
        self.child = serve(&self.config, log);
        self.wait_listening();
    }

    pub fn reference(&self, name: &str) -> String {
        format!("127.0.0.1:{}/{name}", self.port)
    }

    pub fn push_layout(&self, layout: &Path, name: &str) {
        self.push_layout_as(layout, name, None);
    }

    /// Pushes a layout whose tag is an image index, with every image it lists.
    pub fn push_index(&self, layout: &Path, name: &str) {
        run(Command::new("skopeo").args([
            "copy",
            "--all",
            "--dest-tls-verify=false",
            &format!("oci:{}:v1", layout.display()),
            &format!("docker://{}", self.reference(name)),
        ]));
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

/// `docker-registry serve CONFIG`, its output to `log`.
fn serve(config: &Path, log: std::fs::File) -> Child {
    Command::new("docker-registry")
        .arg("serve")
        .arg(config)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("docker-registry (apt-get install docker-registry)")
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

/// Runs the layout script in mode `mode` with `args` into `work/dir` (`work` as its
/// OUTSIDE); the layout it writes, `work/dir/<mode>`.
fn script_layout(work: &Path, dir: &str, mode: &str, args: &[&str]) -> PathBuf {
    let out = work.join(dir);
    std::fs::create_dir_all(&out).expect("mkdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images_data/make_layouts.py");
    run(Command::new("python3")
        .arg(script)
        .arg(&out)
        .arg(work)
        .arg(mode)
        .args(args));
    out.join(mode)
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
    random_layers(work, dir, mib, 4)
}

/// A layout of `count` layers of `mib` MiB of fresh random data each, in `work/dir`.
pub fn random_layers(work: &Path, dir: &str, mib: u32, count: u32) -> PathBuf {
    let (mib, count) = (mib.to_string(), count.to_string());
    script_layout(work, dir, "big", &[&mib, &count])
}

/// A layout in `work/dir` whose upper layer whites out /a, /b and /c of the lower one
/// and has entries of its own in each, listed after the whiteout (/a, /c: the latter
/// through an implicit parent) or before it (/b).
pub fn whiteout_order_layout(work: &Path, dir: &str) -> PathBuf {
    script_layout(work, dir, "whiteout-order", &[])
}

/// A layout in `work/dir` of bash and its libraries under `count` one-file layers
/// (`/layers/0` … `/layers/<count - 1>`).
/// `extra`: `dup` lists the first of them again on top (one digest twice), `bigenv`
/// gives the image an Env of 300 KiB.
pub fn many_layers_layout(work: &Path, dir: &str, count: usize, extra: Option<&str>) -> PathBuf {
    let count = count.to_string();
    let args: Vec<&str> = std::iter::once(count.as_str()).chain(extra).collect();
    script_layout(work, dir, "many", &args)
}

/// A layout in `work/dir` whose tag is an image index of one small image per
/// `linux/ARCH` of `arches` (each with `/etc/arch` and the label `arch`).
pub fn multi_layout(work: &Path, dir: &str, arches: &[&str]) -> PathBuf {
    script_layout(work, dir, "multi", arches)
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

/// `sandboxd registry login HOST --data-dir DATA` with `stdin` (user and password lines).
pub fn login(data: &Path, host: &str, stdin: &str) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(["registry", "login", host, "--data-dir"])
        .arg(data)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sandboxd registry login");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

/// A command's stdout then stderr, as text.
pub fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `sandboxd images pull` of `name` through `proxy` into `data`, returned once the
/// proxy holds its blob's answer (the blob was admitted: its room is claimed).
pub fn pull_held(proxy: &proxy::Proxy, name: &str, data: &Path) -> Child {
    proxy.hold_after(32 << 10);
    let mut pull = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args([
            "images",
            "pull",
            &format!("127.0.0.1:{}/{name}", proxy.port),
        ])
        .arg("--data-dir")
        .arg(data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sandboxd");
    if !proxy.wait_held(|| matches!(pull.try_wait(), Ok(None))) {
        let out = pull.wait_with_output().expect("wait");
        panic!(
            "the pull ended before its blob: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    pull
}
