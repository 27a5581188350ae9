//! `start`: spawn the init, answer its handshake from the host side (id maps, root,
//! cgroup), wait for the agent's socket, and remove everything again on any failure.

use super::cgroup::Limits;
use super::handshake::{self, Channel, InitConfig, Msg};
use super::io;
use super::{destroy, rootfs, slots, sys, LinuxRuntime};
use crate::{RuntimeError, SandboxHandle, SandboxSpec};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Fd number the init finds its end of the handshake socket on.
const SYNC_FD: i32 = 3;
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

pub(super) fn start(rt: &LinuxRuntime, spec: &SandboxSpec) -> Result<SandboxHandle, RuntimeError> {
    let layers = rt.layer_stack(spec)?;
    let state_dir = rt.sandboxes_dir().join(spec.id.to_string());
    // 0700: the agent socket and the sandbox's files are for host root only.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&state_dir)
        .map_err(io("creating the sandbox state dir", &state_dir))?;
    let host_id_base = match rt.slots.allocate(spec.id) {
        Ok(base) => base,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&state_dir);
            return Err(e);
        }
    };
    let mut handle = SandboxHandle {
        id: spec.id,
        agent_pid: 0,
        agent_start_ticks: 0,
        agent_socket: state_dir.join("agent.sock"),
        state_dir,
        host_id_base,
    };
    let mut init: Option<Child> = None;
    match launch(rt, spec, &layers, &mut handle, &mut init) {
        Ok(()) => Ok(handle),
        Err(e) => {
            if let Some(mut child) = init {
                let _ = child.kill();
                let _ = child.wait();
            }
            if let Err(cleanup) = destroy::destroy(rt, &handle) {
                tracing::error!(id = %spec.id, error = %cleanup, "cleaning up a failed start");
            }
            Err(e)
        }
    }
}

fn launch(
    rt: &LinuxRuntime,
    spec: &SandboxSpec,
    layers: &[PathBuf],
    handle: &mut SandboxHandle,
    init: &mut Option<Child>,
) -> Result<(), RuntimeError> {
    let (ours, theirs) = handshake::pair().map_err(agent_err)?;
    let log = handle.state_dir.join("init.log");
    *init = Some(spawn_init(rt, &theirs.0, &log)?);
    drop(theirs);
    let pid = init.as_ref().map(|c| c.id() as i32).unwrap_or(0);
    // Host-only work overlaps the init's exec.
    let disk = Some((rt.config.data_dir.as_path(), spec.disk_mb));
    rootfs::prepare_dirs(&handle.state_dir, layers.len(), handle.host_id_base, disk)?;
    let limits = Limits {
        vcpu: spec.vcpu,
        memory_mb: spec.memory_mb,
        pids_max: spec.pids_max,
    };
    rt.cgroups.create(spec.id, limits)?;
    expect(&ours, &log, |m| matches!(m, Msg::UserNs).then_some(()))?;
    let map = format!("0 {} {}\n", handle.host_id_base, slots::RANGE);
    for file in ["uid_map", "gid_map"] {
        let path = PathBuf::from(format!("/proc/{pid}/{file}"));
        std::fs::write(&path, &map).map_err(io("writing an id map", &path))?;
    }
    let ns_path = PathBuf::from(format!("/proc/{pid}/ns/user"));
    let userns: OwnedFd = std::fs::File::open(&ns_path)
        .map_err(io("opening the user namespace", &ns_path))?
        .into();
    rootfs::mount_root(
        &handle.state_dir,
        layers,
        &userns,
        spec.image == super::images::DEFAULT_IMAGE,
    )?;
    rt.cgroups.attach(spec.id, pid)?;
    protect_from_oom(pid)?;
    let config = InitConfig {
        rootfs: rootfs::rootfs(&handle.state_dir),
        socket: handle.agent_socket.clone(),
        hostname: spec.hostname.clone(),
    };
    ours.send(&Msg::Go(config)).map_err(agent_err)?;
    // The intermediate reports the PID and PID 1 reports Ready, each on its own
    // schedule: take both, in whichever order they come.
    let (mut pid1, mut ready) = (None, false);
    while pid1.is_none() || !ready {
        match expect(&ours, &log, |m| match m {
            Msg::Pid(p) => Some(Some(*p)),
            Msg::Ready => Some(None),
            _ => None,
        })? {
            Some(p) => pid1 = Some(p),
            None => ready = true,
        }
    }
    handle.agent_pid = pid1.unwrap_or_default();
    handle.agent_start_ticks = sys::proc_stat(handle.agent_pid)
        .map(|(_, t)| t)
        .ok_or_else(|| RuntimeError::AgentStart("the agent exited right after starting".into()))?;
    if let Some(mut child) = init.take() {
        let _ = child.wait(); // the intermediate process exits once it has reported
    }
    wait_connectable(&handle.agent_socket)?;
    let path = handle.state_dir.join("handle.json");
    std::fs::write(&path, serde_json::to_vec_pretty(handle).unwrap_or_default())
        .map_err(io("writing the sandbox handle", &path))
}

/// Sets the init's (so the agent's) `oom_score_adj` to -1000 so the memory cgroup's OOM
/// killer picks commands, not the agent. Hosts that deny us CAP_SYS_RESOURCE (some
/// containers) cannot lower it: that is logged, not fatal.
fn protect_from_oom(pid: i32) -> Result<(), RuntimeError> {
    let adj = PathBuf::from(format!("/proc/{pid}/oom_score_adj"));
    match std::fs::write(&adj, "-1000") {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            tracing::warn!(
                pid,
                "cannot lower the agent's oom_score_adj (no CAP_SYS_RESOURCE)"
            );
            Ok(())
        }
        Err(source) => Err(RuntimeError::Io {
            what: "protecting the agent from the OOM killer",
            path: adj,
            source,
        }),
    }
}

/// Spawns `init_exe init_args --sync-fd 3` in its own session, logging to `log`.
fn spawn_init(rt: &LinuxRuntime, theirs: &OwnedFd, log: &Path) -> Result<Child, RuntimeError> {
    let out = std::fs::File::create(log).map_err(io("creating the init log", log))?;
    let err = out.try_clone().map_err(io("creating the init log", log))?;
    let fd = theirs.as_raw_fd();
    let mut cmd = Command::new(&rt.config.init_exe);
    cmd.args(&rt.config.init_args)
        .arg("--sync-fd")
        .arg(SYNC_FD.to_string());
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        );
    // SAFETY: only async-signal-safe calls (dup2, fcntl) run between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, SYNC_FD) < 0 || libc::fcntl(SYNC_FD, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(io("spawning the sandbox init", &rt.config.init_exe))
}

/// Receives the next message and picks the wanted one out; errors carry the init's log.
fn expect<T>(
    ch: &Channel,
    log: &Path,
    want: impl Fn(&Msg) -> Option<T>,
) -> Result<T, RuntimeError> {
    let msg = ch
        .recv(STEP_TIMEOUT)
        .map_err(|e| with_log(e.to_string(), log))?;
    match (want(&msg), msg) {
        (Some(v), _) => Ok(v),
        (None, Msg::Error(text)) => Err(with_log(text, log)),
        (None, other) => Err(RuntimeError::AgentStart(format!(
            "unexpected handshake message {other:?}"
        ))),
    }
}

fn with_log(text: String, log: &Path) -> RuntimeError {
    let tail = std::fs::read_to_string(log).unwrap_or_default();
    let tail = tail.trim();
    if tail.is_empty() {
        RuntimeError::AgentStart(text)
    } else {
        let start = tail
            .char_indices()
            .rev()
            .nth(500)
            .map(|(i, _)| i)
            .unwrap_or(0);
        RuntimeError::AgentStart(format!("{text} (init log: {})", &tail[start..]))
    }
}

fn agent_err(e: handshake::HandshakeError) -> RuntimeError {
    RuntimeError::AgentStart(e.to_string())
}

/// Polls `connect` until the agent's socket accepts.
fn wait_connectable(socket: &Path) -> Result<(), RuntimeError> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        match std::os::unix::net::UnixStream::connect(socket) {
            Ok(_) => return Ok(()),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(200)),
            Err(e) => {
                return Err(RuntimeError::AgentStart(format!(
                    "agent socket {} does not accept: {e}",
                    socket.display()
                )))
            }
        }
    }
}
