//! The inside half of a sandbox start, run by `sandboxd __sandbox-init` (single-threaded):
//! user namespace, handshake with the backend, the other namespaces, PID 1, root switch.

mod held;
mod mounts;
mod net;

pub use held::wait_for_begin;

use super::handshake::{Channel, InitConfig, Msg};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{setgroups, setresgid, setresuid, ForkResult, Gid, Uid};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::time::Duration;

/// How long the init waits for the backend's go-ahead (and a parked PID 1 for its
/// start): a warm init waits as long as its backend lives, and exits at once when the
/// backend goes away (the socket closes).
const GO_TIMEOUT: Duration = Duration::MAX;
/// How long PID 1 waits for the backend to have moved it into its cgroups.
const ATTACHED_TIMEOUT: Duration = Duration::from_secs(60);

/// A failed step of the init, reported to the backend verbatim.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{what}: {source}")]
    Sys { what: String, source: nix::Error },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("handshake: {0}")]
    Handshake(#[from] super::handshake::HandshakeError),
    #[error("unexpected handshake message {0:?}")]
    Unexpected(String),
}

/// The namespaces that need nothing from the host, made with the user namespace (which
/// owns them) as the init's first step, so a warm init has them before its sandbox is
/// known, and a held one while it waits to begin (see [`wait_for_begin`]).
pub struct EarlyNamespaces(());

impl EarlyNamespaces {
    const FLAGS: CloneFlags = CloneFlags::CLONE_NEWUSER
        .union(CloneFlags::CLONE_NEWUTS)
        .union(CloneFlags::CLONE_NEWIPC)
        .union(CloneFlags::CLONE_NEWNET);

    /// In a session of its own (the sandbox must not share a terminal's), unshares
    /// them. The process must have one thread.
    fn make() -> Result<EarlyNamespaces, InitError> {
        let _ = nix::unistd::setsid();
        step("unshare(user, uts, ipc, net)", unshare(Self::FLAGS))?;
        Ok(EarlyNamespaces(()))
    }
}

/// Attaches a step name to a nix result.
pub(crate) fn step<T>(what: impl Into<String>, r: nix::Result<T>) -> Result<T, InitError> {
    r.map_err(|source| InitError::Sys {
        what: what.into(),
        source,
    })
}

/// What PID 1 carries on with: the agent's listening socket and the start config.
/// Call [`Entered::ready`] once the agent is about to serve (or [`Entered::fail`]).
pub struct Entered {
    pub listener: UnixListener,
    pub config: InitConfig,
    channel: Channel,
}

/// The handshake of a parked PID 1, kept until its sandbox starts; and after, when
/// tethered (a one-shot run's early init).
pub struct Parked(Channel, bool);

/// The handshake a tethered PID 1 keeps (see [`InitConfig::tethered`]).
pub struct Tether(Channel);

impl Tether {
    /// Blocks until the backend's end of the handshake closes (its process is gone).
    pub fn wait_until_gone(self) {
        use super::handshake::HandshakeError;
        loop {
            match self.0.recv(GO_TIMEOUT) {
                Ok(_) | Err(HandshakeError::Sys(nix::Error::EINTR)) => {}
                Err(_) => return,
            }
        }
    }
}

impl Parked {
    /// Blocks until the backend says the sandbox starts (`Ok`, with the handshake to
    /// keep watching when tethered), or is gone without it (`Err`: the entry will never
    /// be used, and PID 1 should exit).
    pub fn wait_for_start(self) -> Result<Option<Tether>, InitError> {
        match self.0.recv(GO_TIMEOUT)? {
            Msg::Start => Ok(self.1.then_some(Tether(self.0))),
            other => Err(InitError::Unexpected(format!("{other:?}"))),
        }
    }
}

impl Entered {
    /// Tells the backend the agent is about to serve. A parked PID 1 (see
    /// [`InitConfig::park`]) keeps the handshake to learn that its sandbox starts,
    /// and a tethered one ([`InitConfig::tethered`]) keeps it to watch for the backend's
    /// exit; otherwise it is closed.
    #[allow(clippy::type_complexity)]
    pub fn ready(
        self,
    ) -> Result<(UnixListener, InitConfig, Option<Parked>, Option<Tether>), InitError> {
        self.channel.send(&Msg::Ready)?;
        let (parked, tether) = match (self.config.park, self.config.tethered) {
            (true, tethered) => (Some(Parked(self.channel, tethered)), None),
            (false, true) => (None, Some(Tether(self.channel))),
            (false, false) => (None, None),
        };
        Ok((self.listener, self.config, parked, tether))
    }

    /// Reports a failure of the caller's own last steps to the backend.
    pub fn fail(self, reason: &str) {
        let _ = self.channel.send(&Msg::Error(reason.to_string()));
    }
}

/// Runs the init steps. Returns only in the sandbox's PID 1 (the intermediate process
/// exits inside). Any error is reported over the handshake socket before returning it.
///
/// `while_waiting` runs once the user namespace exists, while the backend prepares the
/// root (or, in a warm init, before its sandbox is known): work that needs the new
/// namespace's capabilities but nothing of the sandbox. PID 1 gets its result. `made`:
/// the early namespaces a held init made while it waited (else they are made here).
pub fn enter<T>(
    sync_fd: RawFd,
    made: Option<EarlyNamespaces>,
    while_waiting: impl FnOnce() -> T,
) -> Result<(Entered, T), InitError> {
    // SAFETY: the backend hands us this fd; nothing else in this process owns it.
    let channel = Channel(unsafe { OwnedFd::from_raw_fd(sync_fd) });
    if let Err(e) = close_inherited(sync_fd) {
        let _ = channel.send(&Msg::Error(e.to_string()));
        return Err(e);
    }
    match steps(&channel, made, while_waiting) {
        Ok((listener, config, early)) => Ok((
            Entered {
                listener,
                config,
                channel,
            },
            early,
        )),
        Err(e) => {
            let _ = channel.send(&Msg::Error(e.to_string()));
            Err(e)
        }
    }
}

/// Closes every descriptor above 2 but the handshake's, which becomes close-on-exec:
/// whatever the server inherited and leaked to us must not reach the sandbox, and the
/// handshake (kept by a parked PID 1) must not reach its commands.
fn close_inherited(sync_fd: RawFd) -> Result<(), InitError> {
    let close = |first: RawFd, last: RawFd, flags: libc::c_uint| {
        if first > last {
            return Ok(());
        }
        // SAFETY: close_range(2) on descriptors nothing in this fresh process uses.
        let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) };
        match rc {
            0 => Ok(()),
            _ => Err(InitError::Sys {
                what: "closing inherited descriptors".into(),
                source: nix::Error::last(),
            }),
        }
    };
    close(3, sync_fd - 1, 0)?;
    close(sync_fd + 1, RawFd::MAX, 0)?;
    close(sync_fd, sync_fd, libc::CLOSE_RANGE_CLOEXEC)
}

fn steps<T>(
    channel: &Channel,
    made: Option<EarlyNamespaces>,
    while_waiting: impl FnOnce() -> T,
) -> Result<(UnixListener, InitConfig, T), InitError> {
    if made.is_none() {
        EarlyNamespaces::make()?;
    }
    channel.send(&Msg::UserNs)?;
    let early = while_waiting();
    let config = match channel.recv(GO_TIMEOUT)? {
        Msg::Go(config) => config,
        other => return Err(InitError::Unexpected(format!("{other:?}"))),
    };
    // Bound while still in the host's mount namespace: a socket resolved in the copy
    // made by unshare(NEWNS) would pin that copy's old root, and with it every host
    // mount it holds locked (other sandboxes' layers included) until this sandbox ends.
    let listener = bind_socket(&config)?;
    let flags = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID;
    step("unshare(mount, pid)", unshare(flags))?;
    // SAFETY: this process is single-threaded, so the child may run any code.
    match step("fork", unsafe { nix::unistd::fork() })? {
        ForkResult::Parent { child } => {
            let sent = channel.send(&Msg::Pid(child.as_raw()));
            // SAFETY: plain process exit of the intermediate; PID 1 carries on.
            unsafe { libc::_exit(i32::from(sent.is_err())) }
        }
        ForkResult::Child => {}
    }
    pid1(&config)?;
    // The backend moves PID 1 into the sandbox's cgroups while the steps above run (the
    // move waits for an RCU grace period); the cgroup namespace is rooted where PID 1
    // is when it is made, so it waits for the word.
    match channel.recv(ATTACHED_TIMEOUT)? {
        Msg::Attached => {}
        other => return Err(InitError::Unexpected(format!("{other:?}"))),
    }
    step("unshare(cgroup)", unshare(CloneFlags::CLONE_NEWCGROUP))?;
    // A parked PID 1 gets its sandbox's hostname from the backend when it starts.
    if !config.park {
        step("sethostname", nix::unistd::sethostname(&config.hostname))?;
    }
    Ok((listener, config, early))
}

/// Becomes uid/gid 0 of the sandbox (its host id base), with no supplementary groups.
fn become_root() -> Result<(), InitError> {
    step("setgroups", setgroups(&[]))?;
    step(
        "setresgid",
        setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0)),
    )?;
    step(
        "setresuid",
        setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0)),
    )
}

/// PID 1's own setup: root, loopback.
///
/// Host paths (socket, root) are reached while still host uid 0, which owns the data
/// dir: as the sandbox's root (an unprivileged host uid) a 0700 ancestor would refuse
/// the lookup. From then on only paths relative to the new root are used.
fn pid1(config: &InitConfig) -> Result<(), InitError> {
    mounts::make_private()?;
    mounts::bind_root(&config.rootfs)?;
    become_root()?;
    mounts::switch_root(config.max_ptys)?;
    net::loopback_up()?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(InitError::Sys {
            what: "prctl(PR_SET_DUMPABLE)".into(),
            source: nix::Error::last(),
        });
    }
    Ok(())
}

/// Binds the agent's socket at its host path (see [`steps`] for why this happens first),
/// by its bare name from its directory: the sandbox sees the bound name in
/// /proc/net/unix, and it must not tell it the host's data dir or ids.
fn bind_socket(config: &InitConfig) -> Result<UnixListener, InitError> {
    let io = |what: String| move |source| InitError::Io { what, source };
    let (Some(dir), Some(name)) = (config.socket.parent(), config.socket.file_name()) else {
        return Err(InitError::Unexpected(format!(
            "agent socket path {}",
            config.socket.display()
        )));
    };
    std::env::set_current_dir(dir).map_err(io(format!("entering {}", dir.display())))?;
    let _ = std::fs::remove_file(name);
    UnixListener::bind(name).map_err(io(format!("binding {}", config.socket.display())))
}
