//! Shared helpers for the Linux backend's integration tests (they run as root).

#![allow(dead_code)]

#[path = "../own_cgroups/mod.rs"]
pub mod own_cgroups;

use sandboxd_runtime::linux::{LinuxConfig, LinuxRuntime};
use sandboxd_runtime::{
    ImageLayers, Layer, Requests, ResourceUsage, Runtime, RuntimeError, SandboxHandle, SandboxSpec,
};
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use uuid::Uuid;

/// A backend that removes the tests' parent cgroup when dropped (if no test uses it).
pub struct TestRuntime(LinuxRuntime);

impl std::ops::Deref for TestRuntime {
    type Target = LinuxRuntime;
    fn deref(&self) -> &LinuxRuntime {
        &self.0
    }
}

impl Drop for TestRuntime {
    /// Destroys whatever a failed test left running, then drops the tests' cgroup parent.
    fn drop(&mut self) {
        for handle in self.0.stored_handles() {
            let _ = self.0.destroy(&handle);
        }
        self.0.drain_warm_inits();
        self.0.cgroups().remove_parent_if_unused();
    }
}

/// Tests pass a `TestRuntime` wherever a `&dyn Runtime` is wanted.
impl Runtime for TestRuntime {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn start(&self, spec: &SandboxSpec) -> Result<SandboxHandle, RuntimeError> {
        self.0.start(spec)
    }
    fn is_alive(&self, handle: &SandboxHandle) -> bool {
        self.0.is_alive(handle)
    }
    fn watch_exit(&self, handle: &SandboxHandle) -> sandboxd_runtime::ExitWatch {
        self.0.watch_exit(handle)
    }
    fn reconcile(
        &self,
        keep: &std::collections::HashSet<Uuid>,
        ended: &std::collections::HashSet<Uuid>,
    ) -> Vec<Uuid> {
        self.0.reconcile(keep, ended)
    }
    fn freeze(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        self.0.freeze(handle)
    }
    fn thaw(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        self.0.thaw(handle)
    }
    fn capture_layer(&self, handle: &SandboxHandle) -> Result<Layer, RuntimeError> {
        self.0.capture_layer(handle)
    }
    fn destroy(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        self.0.destroy(handle)
    }
    fn usage(&self, handle: &SandboxHandle) -> Result<ResourceUsage, RuntimeError> {
        self.0.usage(handle)
    }
    fn resolve_image(&self, name: &str) -> Result<ImageLayers, RuntimeError> {
        self.0.resolve_image(name)
    }
    fn read_image_file(
        &self,
        layers: &[String],
        path: &str,
        max: u64,
    ) -> Result<sandboxd_runtime::ImageFile, RuntimeError> {
        self.0.read_image_file(layers, path, max)
    }
    fn delete_layer(&self, digest: &str) -> Result<(), RuntimeError> {
        self.0.delete_layer(digest)
    }
    fn apply_requests(
        &self,
        handle: &SandboxHandle,
        requests: &Requests,
    ) -> Result<Vec<u32>, RuntimeError> {
        self.0.apply_requests(handle, requests)
    }
    fn free_cpus(&self) -> Option<Vec<u32>> {
        self.0.free_cpus()
    }
}

/// A backend over a fresh data dir, starting the real `sandboxd` binary as init.
pub fn runtime(data_dir: &Path) -> TestRuntime {
    TestRuntime(raw_runtime(data_dir))
}

/// [`runtime`] keeping `count` warm inits.
pub fn warm_runtime(data_dir: &Path, count: usize) -> TestRuntime {
    TestRuntime(raw_runtime(data_dir).with_warm_inits(count))
}

/// [`runtime`] keeping `count` warm inits, more (up to `max`) while starts outrun them.
pub fn growing_warm_runtime(data_dir: &Path, count: usize, max: usize) -> TestRuntime {
    TestRuntime(raw_runtime(data_dir).with_growing_warm_inits(count, max))
}

/// Like [`runtime`] but without clean-up on drop (to play a server that stops). Its
/// parent cgroup is the data dir's own, removed at the test process's exit if empty.
pub fn raw_runtime(data_dir: &Path) -> LinuxRuntime {
    LinuxRuntime::new(LinuxConfig {
        data_dir: data_dir.to_path_buf(),
        init_exe: env!("CARGO_BIN_EXE_sandboxd").into(),
        init_args: vec!["__sandbox-init".into()],
        cgroup_parent: own_cgroups::parent_for(data_dir),
        max_ptys_per_sandbox: sandboxd_runtime::linux::DEFAULT_MAX_PTYS,
    })
    .expect("linux runtime")
}

pub fn spec(image: &str) -> SandboxSpec {
    SandboxSpec {
        id: Uuid::new_v4(),
        image: image.into(),
        extra_layers: vec![],
        hostname: "box".into(),
        vcpu: 1,
        memory_mb: 256,
        pids_max: 128,
        disk_mb: 0,
        isolation: Default::default(),
    }
}

/// Runs `f` to its end on a runtime of its own (the backend's tests are synchronous).
pub fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio")
        .block_on(f)
}

/// Starts a `default` sandbox with a 64 MiB disk from a warm init of `rt` (one filled
/// for that size and waited for), asserting that it took the warm init (its dir, renamed,
/// holds the init's `owner` file).
pub fn start_from_warm_init(rt: &LinuxRuntime) -> SandboxHandle {
    rt.fill_warm_inits(64, false);
    wait_for("a warm init", || rt.warm_inits_ready() >= 1);
    let mut want = spec("default");
    want.disk_mb = 64;
    let handle = rt.start(&want).expect("start from a warm init");
    assert!(
        handle.state_dir.join("owner").exists(),
        "the start did not take the warm init"
    );
    handle
}

/// `GET path` over the agent's Unix socket; returns the response body.
pub fn get(socket: &Path, path: &str) -> String {
    let mut conn = std::os::unix::net::UnixStream::connect(socket).expect("connect agent");
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut response = String::new();
    conn.read_to_string(&mut response).expect("read response");
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "unexpected response {response:?}"
    );
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

/// Runs `script` with bash as root inside the sandbox (entering its namespaces and root).
pub fn sh(handle: &SandboxHandle, script: &str) -> std::process::Output {
    Command::new("nsenter")
        .args([
            "-t",
            &handle.agent_pid.to_string(),
            "-U",
            "-m",
            "-u",
            "-i",
            "-n",
            "-p",
            "-r",
            "-w",
            "--",
            "/bin/bash",
            "-c",
            script,
        ])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("nsenter")
}

/// Stdout of a script that must succeed inside the sandbox.
pub fn sh_ok(handle: &SandboxHandle, script: &str) -> String {
    let out = sh(handle, script);
    assert!(
        out.status.success(),
        "{script:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Mount points at or below `dir` in our mount namespace.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let prefix = dir.display().to_string();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&prefix))
        .map(String::from)
        .collect()
}

/// Asserts that nothing of sandbox `id` is left: process, cgroup, mount, directory, slot.
pub fn assert_gone(rt: &LinuxRuntime, data_dir: &Path, handle: &SandboxHandle) {
    assert!(!rt.is_alive(handle), "agent still alive");
    if handle.agent_pid > 0 {
        assert!(
            !Path::new(&format!("/proc/{}", handle.agent_pid)).exists() || !rt.is_alive(handle)
        );
    }
    for dir in rt.cgroups().dirs(handle.id) {
        assert!(!dir.exists(), "cgroup {} left behind", dir.display());
    }
    assert_eq!(mounts_under(&handle.state_dir), Vec::<String>::new());
    assert!(!handle.state_dir.exists(), "state dir left behind");
    assert!(
        !slot_leases(data_dir).contains(&handle.id.to_string()),
        "id slot left claimed"
    );
}

/// Host-wide id slot leases (`/run/sandboxd/ids/leases`): `(data dir, owner id)`.
pub fn all_slot_leases() -> Vec<(String, String)> {
    sandboxd_runtime::linux::host_slot_leases()
        .into_iter()
        .map(|(dir, id)| (dir.display().to_string(), id.to_string()))
        .collect()
}

/// Ids holding a host id slot leased for `data_dir`.
pub fn slot_leases(data_dir: &Path) -> Vec<String> {
    let dir = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    let dir = dir.display().to_string();
    all_slot_leases()
        .into_iter()
        .filter(|(d, _)| *d == dir)
        .map(|(_, id)| id)
        .collect()
}

/// Runs `script` with `sh -c` through the agent's exec endpoint; returns (exit, stdout).
pub fn agent_sh(handle: &SandboxHandle, script: &str) -> (Option<i32>, String) {
    use base64::Engine;
    let client = sandboxd_agent_protocol::AgentClient::new(handle.agent_socket.clone());
    let req = sandboxd_agent_protocol::ExecRequest {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: None,
        cwd: None,
        timeout_ms: 60_000,
        max_output_bytes: 1 << 20,
        user: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let result = rt.block_on(client.exec(&req)).expect("agent exec");
    let stdout = base64::engine::general_purpose::STANDARD
        .decode(result.stdout)
        .expect("base64");
    (
        result.exit_code,
        String::from_utf8_lossy(&stdout).into_owned(),
    )
}

/// The tracked connections (of the calling thread's network namespace: a test may have
/// moved its thread into one of its own) whose original source is `addr`, from
/// `nf_conntrack`.
pub fn tracked_from(addr: std::net::Ipv4Addr) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/thread-self/net/nf_conntrack").unwrap_or_default();
    let source = format!("src={addr}");
    table
        .lines()
        .filter(|l| l.split_whitespace().find(|w| w.starts_with("src=")) == Some(&source))
        .map(str::to_owned)
        .collect()
}

/// Runs the Python `script` with `host port` inside the sandbox (it must exit 0) and
/// returns its trimmed output (the network tests' connection probe).
pub fn python_probe(handle: &SandboxHandle, script: &str, host: &str, port: u16) -> String {
    let command = format!(
        "exec /usr/bin/python3 -c '{}' {host} {port}",
        script.replace('\'', "'\\''")
    );
    let (code, out) = agent_sh(handle, &command);
    assert_eq!(code, Some(0), "probe failed: {out}");
    out.trim().to_string()
}

/// The fields of /proc/<pid>/stat after the command name (state first, then the parent
/// PID); none once the process is gone.
pub fn stat_fields(pid: i32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Our children that are zombies (state Z in /proc/<pid>/stat, parent us).
pub fn zombie_children() -> Vec<i32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .expect("proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let fields = stat_fields(*pid);
            fields.first().map(String::as_str) == Some("Z") && fields.get(1) == Some(&me)
        })
        .collect()
}

/// Waits (up to a minute) until `done`, failing the test with `what` otherwise.
pub fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Warm entry dirs (`.warm-<key>`) under the data dir's `sandboxes/`: their keys.
pub fn warm_keys(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("sandboxes"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| Some(e.file_name().to_str()?.strip_prefix(".warm-")?.to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Removes failpoint `.0` when dropped: a test that paused a step on another thread
/// unpauses it even when it panics first (its thread scope would wait for ever).
pub struct Unpause(pub &'static str);

impl Drop for Unpause {
    fn drop(&mut self) {
        fail::remove(self.0);
    }
}
