//! The inside half of a held init (the backend's `held_init`): it makes its early
//! namespaces, then waits for the `begin` packet, takes the log that comes with it as
//! its stdout and stderr, and writes itself into the cgroup `tasks` files that come
//! after the log.

use super::InitError;
use crate::linux::cgroup_self_move::move_self;
use crate::linux::handshake::{Channel, Msg};
use crate::linux::held_init::{BEGIN, MAX_BEGIN_FDS};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use std::io::IoSliceMut;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Makes the init's early namespaces (see [`super::EarlyNamespaces`]), then waits on
/// the handshake socket `sync_fd` for `begin` and acts on it: `Ok(None)` when the
/// backend closed the socket instead (the init is not needed: exit quietly). Must run
/// while the process has one thread (the user namespace needs it, and moving that
/// thread moves the process). A failure is reported over the socket (and returned).
///
/// The namespaces come first because the held init waits anyway (for the backend's
/// opening), and their making (~1 ms here, the network namespace's mostly) was on the
/// start's path after `begin`. Their kernel memory is charged to the run's cgroup
/// instead of the sandbox's (a fixed amount per sandbox, not the sandbox's to grow);
/// the move into the sandbox's cgroups below works from inside the new user namespace
/// (cgroup v1 checks the `tasks` file's opener, the host).
pub fn wait_for_begin(sync_fd: RawFd) -> Result<Option<super::EarlyNamespaces>, InitError> {
    let begun = super::EarlyNamespaces::make().and_then(|made| {
        receive(sync_fd).and_then(|fds| match fds {
            None => Ok(None),
            Some(fds) => take(fds).map(|()| Some(made)),
        })
    });
    if let Err(e) = &begun {
        // SAFETY: `sync_fd` is the handshake descriptor this process was started with;
        // it is borrowed for one send and never closed here (`ManuallyDrop`).
        let channel = ManuallyDrop::new(Channel(unsafe { OwnedFd::from_raw_fd(sync_fd) }));
        let _ = channel.send(&Msg::Error(e.to_string()));
    }
    begun
}

/// The descriptors of the `begin` packet (`None` at end of file).
fn receive(sync_fd: RawFd) -> Result<Option<Vec<OwnedFd>>, InitError> {
    let mut payload = [0u8; 16];
    let mut space = nix::cmsg_space!([RawFd; MAX_BEGIN_FDS]);
    let (bytes, fds) = loop {
        let mut iov = [IoSliceMut::new(&mut payload)];
        match recvmsg::<()>(
            sync_fd,
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::Error::EINTR) => continue,
            Err(source) => {
                return Err(InitError::Sys {
                    what: "waiting to begin".into(),
                    source,
                })
            }
            Ok(msg) => {
                let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
                let mut fds = Vec::new();
                for cmsg in msg.cmsgs().map_err(|source| InitError::Sys {
                    what: "reading the begin message".into(),
                    source,
                })? {
                    if let ControlMessageOwned::ScmRights(raw) = cmsg {
                        // SAFETY: the kernel just installed these descriptors in this
                        // process for us (SCM_RIGHTS); nothing else owns them.
                        fds.extend(
                            raw.into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                // Descriptors the kernel could not hand over (no room) would leave the
                // sandbox outside some of its cgroups: refused (those received close).
                if truncated {
                    return Err(InitError::Unexpected(
                        "a begin message with more descriptors than room for them".into(),
                    ));
                }
                break (msg.bytes, fds);
            }
        }
    };
    if bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    if payload.get(..bytes) != Some(BEGIN) || fds.is_empty() {
        return Err(InitError::Unexpected(format!(
            "{:?} with {} descriptors instead of begin",
            String::from_utf8_lossy(payload.get(..bytes).unwrap_or_default()),
            fds.len()
        )));
    }
    Ok(Some(fds))
}

/// The log onto stdout and stderr, then the moves into the `tasks` files.
fn take(fds: Vec<OwnedFd>) -> Result<(), InitError> {
    let mut fds = fds.into_iter();
    if let Some(log) = fds.next() {
        for target in [1, 2] {
            // SAFETY: dup2(2) onto the standard descriptors of this single-threaded
            // process; `log` stays owned (and is closed) here.
            if unsafe { libc::dup2(log.as_raw_fd(), target) } < 0 {
                return Err(InitError::Io {
                    what: "taking the init log".into(),
                    source: std::io::Error::last_os_error(),
                });
            }
        }
    }
    let tasks: Vec<OwnedFd> = fds.collect();
    let raw: Vec<RawFd> = tasks.iter().map(AsRawFd::as_raw_fd).collect();
    move_self(&raw).map_err(|source| InitError::Io {
        what: "moving into the sandbox's cgroups".into(),
        source,
    })
}
