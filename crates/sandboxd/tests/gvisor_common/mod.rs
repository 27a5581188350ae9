//! What the gVisor tests share: the tier over a temp data dir (cleaned up when dropped),
//! the host processes and leftovers of its sandboxes, a sandbox's retained output.
#![allow(dead_code)]

use super::common;
use futures_util::TryStreamExt;
use sandboxd_agent_protocol::AgentClient;
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use sandboxd_runtime::linux::LinuxConfig;
use sandboxd_runtime::{Runtime, SandboxHandle};
use std::path::Path;

/// The tier, destroying what a failed test left and its cgroup parent when dropped.
pub struct Gvisor(pub GvisorRuntime);

impl std::ops::Deref for Gvisor {
    type Target = GvisorRuntime;
    fn deref(&self) -> &GvisorRuntime {
        &self.0
    }
}

impl Drop for Gvisor {
    fn drop(&mut self) {
        for handle in self.0.stored_handles() {
            let _ = self.0.destroy(&handle);
        }
        self.0.cgroups().remove_parent_if_unused();
    }
}

/// The tier over `data_dir`, or `None` (the test is skipped) without runsc.
pub fn gvisor(data_dir: &Path) -> Option<Gvisor> {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return None;
    }
    Some(Gvisor(raw_gvisor(data_dir)))
}

/// [`gvisor`] without clean-up on drop (to play a server that stops).
pub fn raw_gvisor(data_dir: &Path) -> GvisorRuntime {
    GvisorRuntime::new(LinuxConfig {
        data_dir: data_dir.to_path_buf(),
        init_exe: env!("CARGO_BIN_EXE_sandboxd").into(),
        init_args: vec!["__sandbox-init".into()],
        cgroup_parent: crate::common::own_cgroups::parent_for(data_dir),
        max_ptys_per_sandbox: sandboxd_runtime::linux::DEFAULT_MAX_PTYS,
    })
    .expect("gvisor runtime")
}

/// Whether the runsc the server will use has `--net-disconnect-ok`, so that sandboxes
/// with egress go to disk (pause, memory snapshots, forks, autoPause). Without it a test
/// of that says so and is skipped, except where the new runsc is expected: in CI
/// (`SANDBOXD_CI`, set by `.ci/run`, whose `scripts/setup.sh` installs runsc from
/// bookworm-backports) or with `SANDBOXD_EXPECT_RUNSC_DISCONNECT=1`, where it fails.
pub fn runsc_disconnects() -> bool {
    use sandboxd_runtime::linux::gvisor::{features::Features, runsc};
    let Some(exe) = runsc::find() else {
        return false;
    };
    let features = Features::detect(&exe);
    if features.net_disconnect_ok {
        return true;
    }
    let expected = std::env::var_os("SANDBOXD_CI").is_some()
        || std::env::var_os("SANDBOXD_EXPECT_RUNSC_DISCONNECT").is_some_and(|v| v == "1");
    assert!(
        !expected,
        "{} ({}) has no --net-disconnect-ok, and this run expects it: install runsc from \
         bookworm-backports (scripts/setup.sh) or point SANDBOXD_RUNSC at one",
        exe.display(),
        features.version
    );
    eprintln!(
        "{} ({}) has no --net-disconnect-ok: sandboxes with egress stay in memory",
        exe.display(),
        features.version
    );
    false
}

pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio")
        .block_on(f)
}

/// Host processes whose command line mentions `id` (runsc's sandbox and gofer do).
pub fn processes_naming(id: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(id))
                .unwrap_or(false)
        })
        .collect()
}

/// Nothing of the sandbox is left on the host.
pub fn assert_gone(rt: &GvisorRuntime, handle: &SandboxHandle) {
    let id = handle.id.to_string();
    assert!(!rt.is_alive(handle), "sentry still alive");
    assert_eq!(
        processes_naming(&id),
        Vec::<i32>::new(),
        "runsc processes left"
    );
    assert_eq!(
        common::mounts_under(&handle.state_dir),
        Vec::<String>::new()
    );
    assert!(!handle.state_dir.exists(), "state dir left behind");
    let runsc_files: Vec<_> = std::fs::read_dir(rt.runsc_root())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().contains(&id))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        runsc_files,
        Vec::<std::path::PathBuf>::new(),
        "runsc state left"
    );
    for dir in rt.cgroups().dirs(handle.id) {
        assert!(!dir.exists(), "cgroup {} left behind", dir.display());
    }
}

pub const MASTER: &str = "gvisor-test-master-key";
pub const RUNZIVO: &str = "/v1/customer/tenants/default/sandboxes";

/// runsc processes (sentries, gofers) whose command line mentions `dir`, a server's
/// data dir (the server's own command line does too, but it is no runsc).
pub fn processes_under(dir: &Path) -> Vec<i32> {
    processes_naming(&dir.display().to_string())
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"runsc"))
        })
        .collect()
}

/// Destroys, when dropped, the sandboxes a server left in `data` (a server keeps its
/// sandboxes running when it stops, and a failed test stops it early).
pub struct ServerLeftovers(pub std::path::PathBuf);

impl Drop for ServerLeftovers {
    fn drop(&mut self) {
        let config = LinuxConfig {
            data_dir: self.0.clone(),
            init_exe: env!("CARGO_BIN_EXE_sandboxd").into(),
            init_args: vec!["__sandbox-init".into()],
            cgroup_parent: "sandboxd".into(),
            max_ptys_per_sandbox: sandboxd_runtime::linux::DEFAULT_MAX_PTYS,
        };
        // With the host's network state: a left sandbox's lease and rules go too.
        if let Ok(rt) = GvisorRuntime::new(config) {
            let rt = rt.with_network(sandboxd_runtime::linux::NetConfig::from_host());
            for handle in rt.stored_handles() {
                let _ = rt.destroy(&handle);
            }
        }
    }
}

/// Everything the agent retained of process `id`'s output (stdout and stderr).
pub fn retained_output(client: &AgentClient, id: uuid::Uuid) -> String {
    use base64::Engine;
    let frames: Vec<sandboxd_agent_protocol::Frame> = block_on(async {
        let stream = client.output(id, 0, false).await.expect("output");
        stream.try_collect().await.expect("frames")
    });
    let mut out = Vec::new();
    for frame in frames {
        if let sandboxd_agent_protocol::Frame::Log { data, .. } = frame {
            out.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .expect("base64"),
            );
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Keys (runsc container names) of the warm gVisor entries held under `data` now.
pub fn warm_entry_keys(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("sandboxes"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_prefix(".gvwarm-").map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// runsc processes under `data` of its sandboxes, not of a server's warm pool: a
/// pool's entries run under the data dir too (named by their keys, which a taken
/// entry keeps, so this leaves out processes naming a key whose entry dir is there).
/// The entry dirs are read before and after the scan of processes: an entry made
/// meanwhile (its dir comes before its first runsc process, and goes after its last)
/// would otherwise count as a sandbox (the likely cause of one extra pid, gone after
/// the stop, in a CI run of `a_restarted_gvisor_server_adopts_its_running_sandboxes`).
pub fn sandbox_processes_under(data: &Path) -> Vec<i32> {
    let mut keys = warm_entry_keys(data);
    let scanned: Vec<(i32, String)> = processes_under(data)
        .into_iter()
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some((pid, String::from_utf8_lossy(&cmdline).into_owned()))
        })
        .collect();
    keys.extend(warm_entry_keys(data));
    scanned
        .into_iter()
        .filter(|(_, cmdline)| !keys.iter().any(|k| cmdline.contains(k.as_str())))
        .map(|(pid, _)| pid)
        .collect()
}

/// Host cgroup dirs left named `key` (under any controller's `sandboxd` parent).
pub fn cgroups_named(key: &str) -> Vec<std::path::PathBuf> {
    let Ok(controllers) = std::fs::read_dir("/sys/fs/cgroup") else {
        return Vec::new();
    };
    controllers
        .filter_map(|c| c.ok())
        .map(|c| c.path().join("sandboxd").join(key))
        .filter(|p| p.exists())
        .collect()
}

/// Names of the sandbox state dirs under `data`, a server's warm entries left out.
pub fn sandbox_dir_names(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("sandboxes"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|name| !name.starts_with(".gvwarm-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Bytes of the regular files in the state dir `dir`, leaving out the sandbox's disk
/// (its image, and what is mounted from it or from elsewhere).
pub fn walk_sizes(dir: &std::path::Path) -> u64 {
    let skip = [dir.join("layer"), dir.join("layer.img")];
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::symlink_metadata(dir).map(|m| m.dev()).unwrap_or(0);
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if skip.contains(&path) || meta.dev() != dev {
                continue;
            }
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                // Allocated bytes: the disk image is sparse.
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

/// What `/root/who` says in the sandbox `handle`'s socket reaches, on a new connection,
/// or `None` when the call fails.
pub fn who_answers(handle: &SandboxHandle) -> Option<String> {
    use base64::Engine;
    let client = AgentClient::new(handle.agent_socket.clone());
    let req = sandboxd_agent_protocol::ExecRequest {
        argv: vec!["/bin/cat".into(), "/root/who".into()],
        env: None,
        cwd: None,
        timeout_ms: 60_000,
        max_output_bytes: 1 << 20,
        user: None,
    };
    let result = block_on(client.exec(&req)).ok()?;
    let out = base64::engine::general_purpose::STANDARD
        .decode(&result.stdout)
        .expect("base64");
    Some(String::from_utf8_lossy(&out).into_owned())
}
