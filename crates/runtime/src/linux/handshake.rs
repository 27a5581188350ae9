//! The start handshake between the backend and a sandbox's init: small text messages
//! over a `SOCK_SEQPACKET` socket pair (one message per packet, EOF when the peer dies).

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recv, send, socketpair, AddressFamily, MsgFlags, SockFlag, SockType};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The longest single poll(2) of [`Channel::recv`].
const POLL_SLICE: Duration = if cfg!(test) {
    Duration::from_millis(100)
} else {
    Duration::from_secs(60)
};

/// What the backend tells the init once the host side is ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitConfig {
    /// Host path of the prepared root (overlay), visible before the mount namespace is made.
    pub rootfs: PathBuf,
    /// Host path of the agent's Unix socket.
    pub socket: PathBuf,
    pub hostname: String,
    /// Made ahead for a sandbox not known yet (a warm init): PID 1 serves in its root
    /// once ready, but exits if the handshake closes before [`Msg::Start`]; the backend
    /// sets the hostname itself when the sandbox starts.
    #[serde(default)]
    pub park: bool,
    /// PTYs the sandbox may have open at once (its devpts `max=`); 0 leaves the kernel's.
    #[serde(default)]
    pub max_ptys: u32,
    /// Tied to the backend's process (a one-shot run's): PID 1 keeps the handshake and
    /// exits, ending the sandbox, once the backend's end closes (see `tether`).
    #[serde(default)]
    pub tethered: bool,
}

/// One handshake message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// init → backend: the user namespace exists; write its id maps.
    UserNs,
    /// backend → init: maps, root and cgroups are ready; carry on.
    Go(InitConfig),
    /// init → backend: host PID of the sandbox's PID 1.
    Pid(i32),
    /// backend → PID 1: its cgroups hold it; make the cgroup namespace and finish.
    Attached,
    /// backend → parked PID 1: its sandbox starts (it is no longer a warm init).
    Start,
    /// PID 1 → backend: the root is switched and the agent socket is listening.
    Ready,
    /// init → backend: a step failed.
    Error(String),
}

#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("handshake socket: {0}")]
    Sys(#[from] nix::Error),
    #[error("the sandbox init exited during the handshake")]
    Closed,
    #[error("the sandbox init did not answer within {0:?}")]
    Timeout(Duration),
    #[error("malformed handshake message {0:?}")]
    Malformed(String),
}

/// One end of the handshake socket pair.
pub struct Channel(pub OwnedFd);

/// A connected pair; both ends are close-on-exec (the child end is dup'ed onto a fixed
/// fd number when the init is spawned, which clears the flag there only).
pub fn pair() -> Result<(Channel, Channel), HandshakeError> {
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    Ok((Channel(a), Channel(b)))
}

impl Msg {
    fn encode(&self) -> String {
        match self {
            Msg::UserNs => "userns".into(),
            Msg::Go(cfg) => format!("go {}", serde_json::to_string(cfg).unwrap_or_default()),
            Msg::Pid(pid) => format!("pid {pid}"),
            Msg::Attached => "attached".into(),
            Msg::Start => "start".into(),
            Msg::Ready => "ready".into(),
            Msg::Error(e) => format!("error {e}"),
        }
    }

    fn decode(text: &str) -> Result<Self, HandshakeError> {
        let bad = || HandshakeError::Malformed(text.chars().take(200).collect());
        let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
        Ok(match word {
            "userns" => Msg::UserNs,
            "attached" => Msg::Attached,
            "start" => Msg::Start,
            "ready" => Msg::Ready,
            "go" => Msg::Go(serde_json::from_str(rest).map_err(|_| bad())?),
            "pid" => Msg::Pid(rest.parse().map_err(|_| bad())?),
            "error" => Msg::Error(rest.to_string()),
            _ => return Err(bad()),
        })
    }
}

impl Channel {
    pub fn send(&self, msg: &Msg) -> Result<(), HandshakeError> {
        send(
            std::os::fd::AsRawFd::as_raw_fd(&self.0),
            msg.encode().as_bytes(),
            MsgFlags::MSG_NOSIGNAL,
        )?;
        Ok(())
    }

    /// Waits up to `timeout` for the next message; [`Duration::MAX`] waits until one
    /// comes or the peer is gone.
    pub fn recv(&self, timeout: Duration) -> Result<Msg, HandshakeError> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => POLL_SLICE,
            };
            if left.is_zero() {
                return Err(HandshakeError::Timeout(timeout));
            }
            // poll(2) takes an i32 of milliseconds: wait in slices, each ending in a
            // look at the deadline (an empty slice is not yet a timeout).
            let ms = PollTimeout::try_from(left.min(POLL_SLICE).as_millis() as i32)
                .unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, ms) {
                Ok(0) | Err(nix::Error::EINTR) => continue,
                Ok(_) => break,
                Err(e) => return Err(e.into()),
            }
        }
        let mut buf = vec![0u8; 64 * 1024];
        let n = recv(
            std::os::fd::AsRawFd::as_raw_fd(&self.0),
            &mut buf,
            MsgFlags::empty(),
        )?;
        if n == 0 {
            return Err(HandshakeError::Closed);
        }
        Msg::decode(&String::from_utf8_lossy(&buf[..n]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_over_a_pair() {
        let (a, b) = pair().expect("pair");
        let go = Msg::Go(InitConfig {
            rootfs: "/r".into(),
            socket: "/s".into(),
            hostname: "h x".into(),
            park: true,
            max_ptys: 64,
            tethered: true,
        });
        for msg in [
            Msg::UserNs,
            go,
            Msg::Pid(42),
            Msg::Attached,
            Msg::Start,
            Msg::Ready,
            Msg::Error("mount failed: EPERM".into()),
        ] {
            a.send(&msg).expect("send");
            assert_eq!(b.recv(Duration::from_secs(5)).expect("recv"), msg);
        }
        drop(a);
        assert!(matches!(
            b.recv(Duration::from_secs(5)),
            Err(HandshakeError::Closed)
        ));
    }

    #[test]
    fn a_wait_longer_than_one_poll_slice_is_not_a_timeout() {
        let (a, b) = pair().expect("pair");
        let sender = std::thread::spawn(move || {
            std::thread::sleep(POLL_SLICE * 3);
            a.send(&Msg::Start).expect("send");
            a
        });
        // Unbounded and bounded waits both outlast several empty slices.
        assert_eq!(b.recv(Duration::MAX).expect("recv"), Msg::Start);
        let a = sender.join().expect("sender");
        let sender = std::thread::spawn(move || {
            std::thread::sleep(POLL_SLICE * 3);
            a.send(&Msg::Ready).expect("send");
            a
        });
        assert_eq!(b.recv(POLL_SLICE * 20).expect("recv"), Msg::Ready);
        let a = sender.join().expect("sender");
        // A real deadline still ends the wait, and a closed peer ends an unbounded one.
        assert!(matches!(
            b.recv(POLL_SLICE / 2),
            Err(HandshakeError::Timeout(_))
        ));
        drop(a);
        assert!(matches!(b.recv(Duration::MAX), Err(HandshakeError::Closed)));
    }
}
