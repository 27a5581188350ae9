//! An init spawned before the backend needs it and held after its first step (its user,
//! UTS, IPC and network namespaces): a one-shot run spawns its sandbox's init at its
//! very start, so that the init's start-up overlaps the run's own opening instead of
//! following it; forked from the run (`HeldInit::fork`, see `held_fork`) it also skips
//! the exec of the large binary (a few milliseconds of loading). The init
//! waits on its handshake socket for one `begin` packet carrying its log (its stdout
//! and stderr from then on) and the cgroup `tasks` files to write itself into (v1, see
//! `cgroup_self_move`); then it goes on as a freshly spawned init does. Dropped unbegun,
//! it is killed and reaped; it also exits by itself when its socket closes (the run
//! died).

use super::cgroup_self_move::SelfMove;
use super::handshake::{self, Channel};
use super::held_fork::Becoming;
use super::init_child::InitChild;
use super::init_process::{init_command, SYNC_FD};
use super::io;
use crate::RuntimeError;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use std::io::IoSlice;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::process::Stdio;

/// The argument that tells `__sandbox-init` to wait for [`BEGIN`] first.
pub const HELD_ARG: &str = "--held";
/// The payload of the packet that starts a held init.
pub const BEGIN: &[u8] = b"begin";
/// At most this many descriptors come with [`BEGIN`]: the log and one `tasks` file
/// per v1 hierarchy.
pub const MAX_BEGIN_FDS: usize = 16;

/// A spawned (or forked) init waiting for [`HeldInit::begin`].
pub struct HeldInit {
    /// Until begun (or dropped): the init and our end of its handshake.
    held: Option<(InitChild, Channel)>,
}

impl HeldInit {
    /// Spawns `init_exe init_args --held` in a session of its own, with no output until
    /// it is begun. Call it while the process has a single thread (it forks).
    pub fn spawn(init_exe: &Path, init_args: &[String]) -> Result<HeldInit, RuntimeError> {
        let (ours, theirs) =
            handshake::pair().map_err(|e| RuntimeError::AgentStart(e.to_string()))?;
        let mut args = init_args.to_vec();
        args.push(HELD_ARG.into());
        let mut cmd = init_command(init_exe, &args, &theirs.0, Vec::new());
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        // Its own session from the start (as a spawned init makes for itself first): a
        // terminal's Ctrl-C reaches the run, which ends what it started, not the held
        // init directly.
        // SAFETY: setsid(2) is async-signal-safe; the forked child is not a process
        // group leader, so it cannot fail.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::setsid();
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(io("spawning a held sandbox init", init_exe))?;
        Ok(HeldInit {
            held: Some((child.into(), ours)),
        })
    }

    /// As [`HeldInit::spawn`], but the child does not exec `init_exe`: it runs
    /// `entry(handshake fd)` (what `init_exe init_args --held` would run) in its
    /// copy-on-write image of this process, made to look and behave as the exec'd init
    /// would (see `held_fork`). Call it before this process read anything a sandbox
    /// must not hold; spawned as [`HeldInit::spawn`] does when this process has more
    /// than one thread or the kernel cannot show the init's command line.
    pub fn fork(
        init_exe: &Path,
        init_args: &[String],
        entry: fn(RawFd) -> std::process::ExitCode,
    ) -> Result<HeldInit, RuntimeError> {
        let mut argv: Vec<&std::ffi::OsStr> = vec![init_exe.as_os_str()];
        let sync_fd = SYNC_FD.to_string();
        argv.extend(init_args.iter().map(std::ffi::OsStr::new));
        argv.extend([HELD_ARG, "--sync-fd", sync_fd.as_str()].map(std::ffi::OsStr::new));
        let becoming = match crate::faults::hit("held.fork") {
            true => None,
            false => Becoming::new(&argv),
        };
        let Some(becoming) = becoming else {
            return Self::spawn(init_exe, init_args);
        };
        let (ours, theirs) =
            handshake::pair().map_err(|e| RuntimeError::AgentStart(e.to_string()))?;
        // SAFETY: `Becoming::new` found this process single-threaded, so the child may
        // run any code; it never returns from `become_init`.
        match unsafe { nix::unistd::fork() } {
            Ok(nix::unistd::ForkResult::Child) => {
                // SAFETY: the child of that fork.
                unsafe { becoming.become_init(theirs.0.as_raw_fd(), SYNC_FD, entry) }
            }
            Ok(nix::unistd::ForkResult::Parent { child }) => Ok(HeldInit {
                held: Some((InitChild::forked(child.as_raw()), ours)),
            }),
            Err(e) => Err(RuntimeError::AgentStart(format!(
                "forking a held sandbox init: {e}"
            ))),
        }
    }

    /// The init's PID (until begun).
    pub fn id(&self) -> Option<u32> {
        self.held.as_ref().map(|(child, _)| child.id())
    }

    /// Hands the init its log (created at `log`) and, on v1, its cgroups' `tasks` files:
    /// it writes itself into them, then starts as a spawned init does (its first
    /// message is `UserNs`). Its process and handshake, as [`super::init_process::spawn_init`]
    /// and [`handshake::pair`] give them.
    pub(super) fn begin(
        mut self,
        log: &Path,
        moves: Option<&SelfMove>,
    ) -> Result<(InitChild, Channel), RuntimeError> {
        // Kept in `self` until sent: a failure below ends the init on drop.
        let Some((_, channel)) = &self.held else {
            return Err(gone());
        };
        let out = std::fs::File::create(log).map_err(io("creating the init log", log))?;
        let mut fds: Vec<RawFd> = vec![out.as_raw_fd()];
        fds.extend(moves.map(SelfMove::raw).unwrap_or_default());
        if fds.len() > MAX_BEGIN_FDS {
            // The init would get some of them only: refused, a spawned init moves itself.
            return Err(RuntimeError::AgentStart(format!(
                "{} cgroup hierarchies are more than a held init takes",
                fds.len() - 1
            )));
        }
        let sent = sendmsg::<()>(
            channel.0.as_raw_fd(),
            &[IoSlice::new(BEGIN)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        );
        if let Err(e) = sent {
            // Gone after a failed first step (its namespaces), its report is queued.
            let reason = match channel.recv(std::time::Duration::from_millis(1)) {
                Ok(handshake::Msg::Error(text)) => text,
                _ => e.to_string(),
            };
            return Err(RuntimeError::AgentStart(format!(
                "the held sandbox init is gone ({reason})"
            )));
        }
        self.held.take().ok_or_else(gone)
    }
}

fn gone() -> RuntimeError {
    RuntimeError::AgentStart("the held sandbox init is gone".into())
}

impl Drop for HeldInit {
    fn drop(&mut self) {
        if let Some((mut child, channel)) = self.held.take() {
            drop(channel);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
