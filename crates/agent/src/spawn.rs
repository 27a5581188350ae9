//! Validating a command request and launching it (without copying the agent, see
//! `vfork`): its own session and process group, a neutral OOM score, optional
//! confinement last, stdin from /dev/null, piped output.

use crate::error::{check_no_nul, error, invalid};
use crate::reaper::{self, Exit};
use crate::vfork::{self, Program};
use crate::ConfineFn;
use nix::fcntl::OFlag;
use nix::unistd::pipe2;
use sandboxd_agent_protocol::{AgentError, AgentErrorCode, UserIds};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::Path;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

/// What to run, as the request gave it.
pub(crate) struct Launch<'a> {
    pub argv: &'a [String],
    pub env: Option<&'a BTreeMap<String, String>>,
    pub cwd: Option<&'a str>,
    /// Switch to these ids (after the confinement) instead of running as root.
    pub user: Option<&'a UserIds>,
}

/// A started child: its PID (also its process group), output pipes and exit status.
pub(crate) struct Spawned {
    pub pid: u32,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    pub exit: oneshot::Receiver<Exit>,
}

/// Checks argv, environment and working directory; every problem is `invalid_argument`.
pub(crate) fn validate(l: &Launch<'_>) -> Result<(), AgentError> {
    let first = l
        .argv
        .first()
        .ok_or_else(|| invalid("argv must not be empty"))?;
    for a in l.argv {
        check_no_nul("argv", a)?;
    }
    if !first.starts_with('/') {
        return Err(invalid("argv[0] must be an absolute path"));
    }
    for (k, v) in l.env.into_iter().flatten() {
        check_no_nul("environment", k)?;
        check_no_nul("environment", v)?;
        if k.is_empty() || k.contains('=') {
            return Err(invalid(format!("bad environment variable name {k:?}")));
        }
    }
    if let Some(cwd) = l.cwd {
        check_no_nul("cwd", cwd)?;
        if !cwd.starts_with('/') {
            return Err(invalid("cwd must be an absolute path"));
        }
        if !Path::new(cwd).is_dir() {
            return Err(invalid(format!("cwd {cwd} is not an existing directory")));
        }
    }
    Ok(())
}

/// Validates and starts the command.
pub(crate) fn spawn(
    l: &Launch<'_>,
    default_env: &BTreeMap<String, String>,
    confine: Option<&ConfineFn>,
) -> Result<Spawned, AgentError> {
    validate(l)?;
    let spawn_failed = |e: std::io::Error| {
        error(
            AgentErrorCode::SpawnFailed,
            format!("cannot start {}: {e}", l.argv[0]),
        )
    };
    let io_err = |e: std::io::Error| error(AgentErrorCode::Io, format!("output pipe: {e}"));
    may_set_oom_score();
    let program = Program::new(l.argv, l.env.unwrap_or(default_env), l.cwd.unwrap_or("/"))
        .map_err(spawn_failed)?;
    let null = dev_null().map_err(spawn_failed)?;
    let (out_rx, out_tx) = pipe2(OFlag::O_CLOEXEC).map_err(|e| io_err(e.into()))?;
    let (err_rx, err_tx) = pipe2(OFlag::O_CLOEXEC).map_err(|e| io_err(e.into()))?;
    let stdio = [null.as_raw_fd(), out_tx.as_raw_fd(), err_tx.as_raw_fd()];
    // In the child, after setsid: only syscalls (open, write, close) and the
    // confinement, which is prepared beforehand.
    let setup = || {
        command_defaults()?;
        if let Some(f) = confine {
            f()?;
        }
        match l.user {
            Some(user) => switch_user(user),
            None => Ok(()),
        }
    };
    // The score is set under the reaper's lock: the command cannot be reaped (and its
    // PID taken by another process) before it.
    let (pid, exit) = reaper::spawn_with(|| {
        let pid = vfork::spawn(&program, stdio, &setup)?;
        neutral_oom_score_of(pid as u32);
        Ok((pid as u32, pid))
    })
    .map_err(spawn_failed)?;
    // Our copies of the child's ends go now: the pipes reach EOF when the child's do.
    drop((out_tx, err_tx));
    Ok(Spawned {
        pid,
        stdout: pipe::Receiver::from_owned_fd(out_rx).map_err(io_err)?,
        stderr: pipe::Receiver::from_owned_fd(err_rx).map_err(io_err)?,
        exit,
    })
}

/// `/dev/null`, every command's stdin: opened once (close-on-exec) and kept, rather than
/// opened for each command.
pub(crate) fn dev_null() -> std::io::Result<&'static std::fs::File> {
    static NULL: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    if let Some(null) = NULL.get() {
        return Ok(null);
    }
    let null = std::fs::File::open("/dev/null")?;
    Ok(NULL.get_or_init(|| null))
}

/// What every command starts with, set in the child before its confinement: only
/// descriptors 0-2 (the agent's own, and whatever it inherited, are marked
/// close-on-exec), a neutral OOM score, and the soft open-files limit of a login
/// (the agent runs with its sandbox's hard limit as its soft one).
pub(crate) fn command_defaults() -> std::io::Result<()> {
    sandboxd_confine::descriptors::close_on_exec_from(3)?;
    neutral_oom_score();
    command_open_files()
}

/// Becomes `user`: supplementary groups, gid, then uid, by raw syscalls (glibc's
/// wrappers signal every thread of the process, which a vfork child shares with the
/// agent). Leaving uid 0 drops every capability. Runs after the confinement, which
/// keeps CAP_SETUID and CAP_SETGID for this.
pub(crate) fn switch_user(user: &UserIds) -> std::io::Result<()> {
    let check = |rc: libc::c_long| match rc {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    };
    let groups: &[libc::gid_t] = &user.groups;
    // SAFETY: raw id syscalls with plain integers and a slice that outlives the call.
    unsafe {
        check(libc::syscall(
            libc::SYS_setgroups,
            groups.len(),
            groups.as_ptr(),
        ))?;
        check(libc::syscall(
            libc::SYS_setresgid,
            user.gid,
            user.gid,
            user.gid,
        ))?;
        check(libc::syscall(
            libc::SYS_setresuid,
            user.uid,
            user.uid,
            user.uid,
        ))
    }
}

/// Lowers the soft `RLIMIT_NOFILE` to [`COMMAND_OPEN_FILES`] (a command may raise it
/// again up to the hard limit, which only the host can raise).
fn command_open_files() -> std::io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on our own structure.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit.rlim_cur = limit.rlim_cur.min(COMMAND_OPEN_FILES);
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The soft open-files limit a command starts with (as on most Linux logins).
pub const COMMAND_OPEN_FILES: libc::rlim_t = 1024;

/// Writes 0 to /proc/self/oom_score_adj (the agent itself runs at -1000), in a child
/// before its exec; errors ignored. Nothing when the agent found it cannot write the
/// file at all ([`may_set_oom_score`]): [`neutral_oom_score_of`] does it after the exec.
pub(crate) fn neutral_oom_score() {
    if OOM_SCORE_WRITABLE.get() == Some(&false) {
        return;
    }
    let path = c"/proc/self/oom_score_adj";
    // SAFETY: plain open/write/close on a constant path from the forked child.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
        }
    }
}

/// After a command's exec (`pid` runs its own program), sets its OOM score to 0 from
/// the agent when the command could not do it itself before its exec (see
/// [`may_set_oom_score`]) and the agent's own score is not 0 already (then the
/// command's is not either: it inherited it); errors ignored (the command may be gone).
///
/// A command's `/proc/<pid>` files belong to the agent's credentials until its exec
/// (it shares or copies the agent's non-dumpable memory, whose owner is the host's
/// root when the init was started outside the sandbox's user namespace); after its
/// exec they are the command's, and the agent, root of the sandbox, may write them.
/// Raising a score needs no privilege. The command runs at the agent's score from its
/// exec until this write (tens of microseconds: the agent wakes from the vfork, opens
/// and writes the file): a program that forks in its very first instructions, as a
/// tenant trying for it could, hands that score on to its children, which nothing
/// resets. Closing that window needs the child to write its own score before its exec
/// (an init exec'd inside the sandbox's user namespace) or a trampoline exec.
pub(crate) fn neutral_oom_score_of(pid: u32) {
    if OOM_SCORE_WRITABLE.get() != Some(&false) || own_oom_score() == Some(0) {
        return;
    }
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/oom_score_adj"))
    {
        let _ = std::io::Write::write_all(&mut file, b"0");
    }
}

/// The agent's own OOM score now (what a command has until [`neutral_oom_score_of`]),
/// read through a descriptor kept open (one `pread`); `None` when it cannot be read.
fn own_oom_score() -> Option<i32> {
    static OWN: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    let file = OWN
        .get_or_init(|| std::fs::File::open("/proc/self/oom_score_adj").ok())
        .as_ref()?;
    let mut buf = [0u8; 16];
    let n = std::os::unix::fs::FileExt::read_at(file, &mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// Whether the agent may open its `oom_score_adj` for writing (its children have its
/// credentials until their exec): in a user namespace that does not own the file it
/// may not, and a child's open would only fail (a path walk through /proc on every
/// command's start); the agent sets the score after the exec instead.
static OOM_SCORE_WRITABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Finds out, in the agent and once, whether children can set their OOM score before
/// their exec (read by [`neutral_oom_score`] in each child, and by
/// [`neutral_oom_score_of`] after it).
pub(crate) fn may_set_oom_score() {
    OOM_SCORE_WRITABLE.get_or_init(|| {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/proc/self/oom_score_adj")
            .map_or_else(
                |e| e.kind() != std::io::ErrorKind::PermissionDenied,
                |_| true,
            )
    });
    own_oom_score();
}

/// Sends `sig` to the process group led by `pid`; a vanished group is not an error.
pub(crate) fn kill_group(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a negative PID addresses the process group.
    unsafe { libc::kill(-(pid as i32), sig) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(argv: &[&str], env: Option<&[(&str, &str)]>, cwd: Option<&str>) -> bool {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let env: Option<BTreeMap<String, String>> = env.map(|e| {
            e.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        });
        validate(&Launch {
            argv: &argv,
            env: env.as_ref(),
            cwd,
            user: None,
        })
        .is_ok()
    }

    #[test]
    fn rejects_bad_commands() {
        assert!(check(&["/bin/true"], None, Some("/tmp")));
        assert!(!check(&[], None, None));
        assert!(!check(&["true"], None, None));
        assert!(!check(&["/bin/echo", "a\0b"], None, None));
        assert!(!check(&["/bin/true"], Some(&[("", "x")]), None));
        assert!(!check(&["/bin/true"], Some(&[("A=B", "x")]), None));
        assert!(!check(&["/bin/true"], Some(&[("A", "x\0")]), None));
        assert!(!check(&["/bin/true"], None, Some("tmp")));
        assert!(!check(&["/bin/true"], None, Some("/no/such/dir")));
    }
}
