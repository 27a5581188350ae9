//! The agent's socket dir of a gVisor sandbox, and how the host reaches the agent
//! without trusting anything the sandbox can name.
//!
//! The sandbox sees `/.sandboxd/run` bound read-write from the host (runsc
//! `--host-uds=create` makes the agent's bind there a real host socket, through the
//! gofer), so the sandbox can create, rename and remove names in that dir as host
//! operations. The host therefore never connects to, reads or follows a name there:
//!
//! - The dir lives on the sandbox's own disk (`layer/agent/run`, beside its upper
//!   dir), so what the sandbox writes there counts against its disk limit.
//! - Once the agent has bound its socket, the host hard-links that socket's inode
//!   (`linkat` without following, checked to be a socket *after* the link, on the
//!   host's own name) into `layer/agent/host/`, a dir the sandbox cannot reach, and
//!   connects only there: a later rename, symlink or socket of the sandbox's in its dir
//!   changes nothing for the host. A Unix socket is reached through its inode, so every
//!   name of it reaches the same listener; and a hard link cannot leave the filesystem
//!   (the sandbox's own disk), so the only sockets it can name are the sandbox's own.
//! - The agent's checkpoint verdict is read with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS)`, non-blocking, a regular file only, a few hundred bytes at
//!   most, and only its known forms are accepted (see [`read_verdict`]).
//! - The agent's output file (which the sandbox can write through its PID 1's stdout)
//!   is on the sandbox's disk as well, and only its last 4 KiB are ever read.

use super::bundle::QUIESCED;
use crate::linux::disk;
use crate::RuntimeError;
use rustix::fs::{self, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The socket's name in both dirs.
const SOCKET_NAME: &str = "agent.sock";
/// How long a start waits for the agent's socket.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(20);
/// At most this much of the verdict file is read.
const VERDICT_MAX: u64 = 512;
/// The agent's verdict when a process holds a host socket (see `gvisor_agent.rs`).
const HOST_SOCKETS_PREFIX: &str =
    "processes listen on Unix sockets on the host-backed filesystem (";

/// The dir holding the sandbox's and the host's socket dirs, on the sandbox's disk.
fn base(state_dir: &Path) -> PathBuf {
    disk::layer_dir(state_dir).join("agent")
}

/// The host dir bound as the sandbox's `/.sandboxd/run` (the sandbox writes there).
pub fn run_dir(state_dir: &Path) -> PathBuf {
    base(state_dir).join("run")
}

/// The host's own dir, out of the sandbox's reach.
fn host_dir(state_dir: &Path) -> PathBuf {
    base(state_dir).join("host")
}

/// The host's own name of the agent's socket (a hard link the sandbox cannot reach):
/// the handle's `agent_socket`.
pub fn host_socket(state_dir: &Path) -> PathBuf {
    host_dir(state_dir).join(SOCKET_NAME)
}

/// Why a sandbox started by an earlier sandboxd (its socket dir on the data dir,
/// reached by path) is not paused to disk or restored, or `None`.
pub(super) fn legacy(handle: &crate::SandboxHandle) -> Option<String> {
    (handle.agent_socket != host_socket(&handle.state_dir)).then(|| {
        "it was started by an earlier sandboxd, whose agent socket dir the sandbox could \
         redirect; it cannot go to disk or come back from it (delete it and create it again)"
            .into()
    })
}

/// The agent's output (runsc's stdout and stderr for the sandbox): on the sandbox's
/// disk too, since the sandbox can write to it (its PID 1's `/proc/1/fd/1`).
pub fn log_path(state_dir: &Path) -> PathBuf {
    disk::layer_dir(state_dir).join("agent.log")
}

/// The end of the agent's output (at most 4 KiB), for an error message.
pub(super) fn log_tail(state_dir: &Path) -> String {
    use std::io::{Seek, SeekFrom};
    const TAIL: u64 = 4096;
    let Ok(mut file) = std::fs::File::open(log_path(state_dir)) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL)));
    let mut bytes = Vec::new();
    let _ = file.take(TAIL).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// Makes both dirs (0700) on the sandbox's disk, which must be mounted.
pub(super) fn make(state_dir: &Path) -> Result<(), RuntimeError> {
    let base = base(state_dir);
    for dir in [base.clone(), base.join("run"), base.join("host")] {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(super::super::io("creating the agent socket dir", &dir))?;
    }
    Ok(())
}

fn open_dir(dir: &Path) -> Result<OwnedFd, Errno> {
    fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Removes both names of the agent's socket (before the agent binds it again): the
/// host's link and whatever the sandbox's dir holds under that name (`unlinkat` never
/// follows).
pub(super) fn forget_socket(state_dir: &Path) {
    let _ = std::fs::remove_file(host_socket(state_dir));
    if let Ok(run) = open_dir(&run_dir(state_dir)) {
        let _ = fs::unlinkat(&run, SOCKET_NAME, AtFlags::empty());
    }
}

/// Links the socket the agent bound in its dir to the host's name when it is there and
/// is a socket; whether the host's name now is one. Never follows a name of the
/// sandbox's: what the link made is checked on the host's name, which only the host
/// changes.
pub(super) fn adopt_socket(state_dir: &Path) -> bool {
    let (Ok(run), Ok(host)) = (
        open_dir(&run_dir(state_dir)),
        open_dir(&host_dir(state_dir)),
    ) else {
        return false;
    };
    if is_socket(&host) {
        return true;
    }
    let _ = fs::unlinkat(&host, SOCKET_NAME, AtFlags::empty());
    match fs::statat(&run, SOCKET_NAME, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Socket => {}
        _ => return false,
    }
    // No AT_SYMLINK_FOLLOW: a name swapped meanwhile for a symlink is linked as one
    // (and refused below).
    if fs::linkat(&run, SOCKET_NAME, &host, SOCKET_NAME, AtFlags::empty()).is_err() {
        return false;
    }
    if is_socket(&host) {
        return true;
    }
    let _ = fs::unlinkat(&host, SOCKET_NAME, AtFlags::empty());
    false
}

/// Whether the agent's socket, adopted (see [`adopt_socket`]), accepts a connection now.
pub(super) fn connectable(state_dir: &Path) -> Result<(), String> {
    if !adopt_socket(state_dir) {
        return Err("the agent has not bound its socket".into());
    }
    sandboxd_agent_protocol::socket_path::connect(&host_socket(state_dir))
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Waits until [`connectable`], at most `timeout`.
pub(super) fn wait_connectable(state_dir: &Path, timeout: Duration) -> Result<(), RuntimeError> {
    let deadline = Instant::now() + timeout;
    loop {
        match connectable(state_dir) {
            Ok(()) => return Ok(()),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(200)),
            Err(e) => {
                return Err(RuntimeError::AgentStart(format!(
                    "agent socket {} does not accept: {e}",
                    host_socket(state_dir).display()
                )))
            }
        }
    }
}

fn is_socket(host: &OwnedFd) -> bool {
    matches!(
        fs::statat(host, SOCKET_NAME, AtFlags::SYMLINK_NOFOLLOW),
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Socket
    )
}

/// Removes the agent's verdict file (unlinking never follows).
pub(super) fn remove_verdict(state_dir: &Path) {
    if let Ok(run) = open_dir(&run_dir(state_dir)) {
        let _ = fs::unlinkat(&run, QUIESCED, AtFlags::empty());
    }
}

/// What the verdict file says.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Not there yet, or being written.
    Pending,
    /// The agent let go of its socket.
    Ok,
    /// The agent refuses; the reason, in the host's own words.
    Refused(String),
}

/// Reads the agent's verdict without following anything: a symlink, a dir, a FIFO or a
/// device there is refused as an unknown verdict, never opened for reading.
pub(super) fn read_verdict(state_dir: &Path) -> Verdict {
    let Ok(run) = open_dir(&run_dir(state_dir)) else {
        return Verdict::Pending;
    };
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match fs::openat2(&run, QUIESCED, flags, Mode::empty(), resolve) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Verdict::Pending,
        Err(_) => return unknown(),
    };
    match fs::fstat(&fd) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {}
        _ => return unknown(),
    }
    let mut bytes = Vec::new();
    if std::fs::File::from(fd)
        .take(VERDICT_MAX)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return unknown();
    }
    parse_verdict(&bytes, VERDICT_MAX)
}

fn unknown() -> Verdict {
    Verdict::Refused("the sandbox's agent gave no verdict sandboxd knows".into())
}

/// The verdict `bytes` (at most `max` read) say. Written whole by one write: an empty
/// read, or one without its final newline short of `max`, is a write in progress.
fn parse_verdict(bytes: &[u8], max: u64) -> Verdict {
    let whole = bytes.ends_with(b"\n") || bytes.len() as u64 >= max;
    if bytes.is_empty() || !whole {
        return Verdict::Pending;
    }
    if bytes == b"ok\n" {
        return Verdict::Ok;
    }
    let Some(rest) = bytes.strip_prefix(HOST_SOCKETS_PREFIX.as_bytes()) else {
        return unknown();
    };
    // The sandbox's own socket paths, shown plain (printable ASCII, bounded).
    let paths: String = rest
        .iter()
        .take_while(|b| **b != b')')
        .map(|b| match b {
            0x20..=0x7e => *b as char,
            _ => '?',
        })
        .take(300)
        .collect();
    Verdict::Refused(format!(
        "processes listen on Unix sockets on the host-backed filesystem ({paths}), \
         which gVisor cannot checkpoint"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_verdicts_are_accepted_and_nothing_else_is_echoed() {
        assert_eq!(parse_verdict(b"ok\n", 512), Verdict::Ok);
        assert_eq!(parse_verdict(b"", 512), Verdict::Pending);
        assert_eq!(parse_verdict(b"o", 512), Verdict::Pending);
        let secret = b"TOPSECRET-host-file-0600\n";
        match parse_verdict(secret, 512) {
            Verdict::Refused(why) => assert!(!why.contains("TOPSECRET"), "{why}"),
            other => panic!("{other:?}"),
        }
        let long = vec![b'x'; 512];
        assert!(matches!(parse_verdict(&long, 512), Verdict::Refused(w) if !w.contains("xxx")));
        let sockets = format!("{HOST_SOCKETS_PREFIX}/root/app.sock\x1b[2J), which\n");
        match parse_verdict(sockets.as_bytes(), 512) {
            Verdict::Refused(why) => {
                assert!(why.contains("(/root/app.sock?[2J)"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_handle_of_the_old_layout_is_told_apart() {
        let state = Path::new("/data/sandboxes/x");
        let mut handle = crate::SandboxHandle {
            id: uuid::Uuid::new_v4(),
            agent_pid: 1,
            agent_start_ticks: 1,
            agent_socket: state.join("agent").join("agent.sock"),
            state_dir: state.to_path_buf(),
            host_id_base: 0,
            warm: false,
            isolation: crate::Isolation::Gvisor,
        };
        assert!(legacy(&handle).is_some());
        handle.agent_socket = host_socket(state);
        assert_eq!(legacy(&handle), None);
    }

    #[test]
    fn the_host_never_follows_a_symlink_planted_as_the_verdict_or_the_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path();
        std::fs::create_dir(disk::layer_dir(state)).expect("layer dir");
        make(state).expect("make");
        let secret = state.join("secret");
        std::fs::write(&secret, "ok\n").expect("secret");
        std::os::unix::fs::symlink(&secret, run_dir(state).join(QUIESCED)).expect("link");
        assert!(matches!(read_verdict(state), Verdict::Refused(_)));
        // A symlink to a socket elsewhere is not adopted.
        let other = state.join("other.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&other).expect("bind");
        std::os::unix::fs::symlink(&other, run_dir(state).join(SOCKET_NAME)).expect("link");
        assert!(!adopt_socket(state));
        assert!(host_socket(state).symlink_metadata().is_err());
        // The agent's own socket is, and stays reachable when the sandbox renames it.
        forget_socket(state);
        let own = run_dir(state).join(SOCKET_NAME);
        let agent = std::os::unix::net::UnixListener::bind(&own).expect("bind");
        assert!(adopt_socket(state));
        std::fs::rename(&own, run_dir(state).join("moved")).expect("rename");
        std::os::unix::fs::symlink(&other, &own).expect("link");
        assert!(adopt_socket(state));
        let _conn = std::os::unix::net::UnixStream::connect(host_socket(state)).expect("connect");
        agent.set_nonblocking(true).expect("nonblocking");
        agent
            .accept()
            .expect("the agent's own listener took the connection");
    }
}
