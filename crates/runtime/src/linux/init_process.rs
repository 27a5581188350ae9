//! The host's handling of one init process: spawning it with its end of the handshake,
//! reading its replies (with its log on failure), writing its id maps, protecting it
//! from the OOM killer, and waiting until its agent's socket accepts.

use super::cgroup_self_move::{move_self, SelfMove};
use super::handshake::{self, Channel, Msg};
use super::init_child::InitChild;
use super::{io, slots, LinuxConfig};
use crate::RuntimeError;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Fd number the init finds its end of the handshake socket on.
pub(super) const SYNC_FD: i32 = 3;
/// How long one handshake step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

/// Sets the init's (so the agent's) OOM score to -1000 so the memory cgroup's OOM
/// killer picks commands, not the agent. Hosts that deny us CAP_SYS_RESOURCE (some
/// containers) cannot lower it: that is logged (once per process), not fatal.
///
/// Commands inherit both the score (the agent sets theirs to 0 after their exec) and
/// the floor a process may lower its own score to without privilege
/// (`oom_score_adj_min`). A privileged write of `oom_score_adj` sets that floor to the
/// value written, so -1000 there would let any command make itself unkillable again.
/// The floor is set to 0 first (a privileged write of 0: sandboxd's own floor, which a
/// service manager may have lowered, is not handed on), then the score is lowered
/// through the legacy `oom_adj` (-17, stored as -1000), which leaves the floor alone.
/// The kernel logs once per boot that `oom_adj` is deprecated (it keeps it for
/// existing programs).
pub(super) fn protect_from_oom(pid: i32) -> Result<(), RuntimeError> {
    let floor = PathBuf::from(format!("/proc/{pid}/oom_score_adj"));
    let protect = PathBuf::from(format!("/proc/{pid}/oom_adj"));
    for (path, value) in [(floor, "0"), (protect, "-17")] {
        match std::fs::write(&path, value) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                // The host's answer does not change: one warning per process, not one
                // per sandbox (a server's log had one at every create).
                static WARNED: AtomicBool = AtomicBool::new(false);
                if !WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        pid,
                        "cannot lower the agents' OOM scores (no CAP_SYS_RESOURCE): the \
                         memory cgroup's OOM killer may pick an agent (said once)"
                    );
                } else {
                    tracing::debug!(pid, "agent's OOM score left as it is");
                }
                return Ok(());
            }
            Err(source) => {
                return Err(RuntimeError::Io {
                    what: "protecting the agent from the OOM killer",
                    path,
                    source,
                })
            }
        }
    }
    Ok(())
}

/// Spawns `init_exe init_args --sync-fd 3` in its own session, logging to `log`; with
/// `moves`, the child moves itself into those cgroups before its exec (a failed move
/// fails the spawn: the child never execs).
pub(super) fn spawn_init(
    config: &LinuxConfig,
    theirs: &OwnedFd,
    log: &Path,
    moves: Option<&SelfMove>,
) -> Result<InitChild, RuntimeError> {
    let out = std::fs::File::create(log).map_err(io("creating the init log", log))?;
    let err = out.try_clone().map_err(io("creating the init log", log))?;
    let files = moves.map(SelfMove::raw).unwrap_or_default();
    let mut cmd = init_command(&config.init_exe, &config.init_args, theirs, files);
    cmd.stdout(out).stderr(err);
    let what = match moves {
        Some(_) => "spawning the sandbox init (moving into its cgroups, then exec)",
        None => "spawning the sandbox init",
    };
    cmd.spawn()
        .map(InitChild::from)
        .map_err(io(what, &config.init_exe))
}

/// The command that spawns `init_exe init_args --sync-fd 3` with `theirs` on fd 3, a
/// clean environment and stdin from /dev/null (stdout and stderr are the caller's to
/// set); the child writes itself into the cgroup `tasks` files `moves` before its exec
/// (a failed move fails the spawn: the child never execs).
pub(super) fn init_command(
    init_exe: &Path,
    init_args: &[String],
    theirs: &OwnedFd,
    moves: Vec<std::os::fd::RawFd>,
) -> Command {
    let fd = theirs.as_raw_fd();
    let mut cmd = Command::new(init_exe);
    cmd.args(init_args)
        .arg("--sync-fd")
        .arg(SYNC_FD.to_string());
    cmd.stdin(Stdio::null()).env_clear().env(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    // SAFETY: only async-signal-safe calls (write, dup2, fcntl) run between fork and
    // exec; the descriptors in `moves` stay open in the parent until `spawn` returns.
    unsafe {
        cmd.pre_exec(move || {
            move_self(&moves)?;
            if libc::dup2(fd, SYNC_FD) < 0 || libc::fcntl(SYNC_FD, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Receives the next message and picks the wanted one out; errors carry the init's log.
pub(super) fn expect<T>(
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

pub(super) fn agent_err(e: handshake::HandshakeError) -> RuntimeError {
    RuntimeError::AgentStart(e.to_string())
}

/// Polls `connect` until the agent's socket accepts.
pub(super) fn wait_connectable(socket: &Path) -> Result<(), RuntimeError> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        match sandboxd_agent_protocol::socket_path::connect(socket) {
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

/// Writes the init's id maps: its root is host id `base`.
pub(super) fn map_ids(pid: i32, base: u32) -> Result<OwnedFd, RuntimeError> {
    let map = format!("0 {base} {}\n", slots::RANGE);
    for file in ["uid_map", "gid_map"] {
        let path = PathBuf::from(format!("/proc/{pid}/{file}"));
        std::fs::write(&path, &map).map_err(io("writing an id map", &path))?;
    }
    let ns_path = PathBuf::from(format!("/proc/{pid}/ns/user"));
    Ok(std::fs::File::open(&ns_path)
        .map_err(io("opening the user namespace", &ns_path))?
        .into())
}
