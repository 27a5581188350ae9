//! Interactive terminals: a login shell on a new PTY (its own session with the PTY as
//! controlling terminal, confined like every command), bridged to an upgraded
//! connection carrying [`PtyFrame`]s.

use crate::body::{self, Body};
use crate::error::{error, invalid};
use crate::reaper::{self, Exit};
use crate::shared::Shared;
use crate::spawn::{self, kill_group, Launch};
use bytes::BytesMut;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use sandboxd_agent_protocol::pty::{PtyFrame, UPGRADE};
use sandboxd_agent_protocol::{AgentError, AgentErrorCode, UserIds};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

const SHELL: [&str; 2] = ["/bin/bash", "-l"];

fn io_error(what: &str) -> impl Fn(std::io::Error) -> AgentError + '_ {
    move |e| error(AgentErrorCode::Io, format!("{what}: {e}"))
}

fn cloexec(fd: RawFd) {
    // SAFETY: fcntl(2) on a descriptor this module owns.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
}

fn set_size(fd: RawFd, cols: u16, rows: u16) {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ with a pointer to a live winsize on our PTY master.
    unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) };
}

/// Starts the shell and answers 101; the bridge runs once the connection is upgraded.
pub(crate) fn open(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    cols: u16,
    rows: u16,
    cwd: &str,
    user: Option<UserIds>,
) -> Result<Response<Body>, AgentError> {
    let upgrade = req.headers().get(http::header::UPGRADE);
    if !upgrade.is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(UPGRADE.as_bytes())) {
        return Err(invalid(format!("the PTY route needs Upgrade: {UPGRADE}")));
    }
    let argv: Vec<String> = SHELL.iter().map(|s| s.to_string()).collect();
    spawn::validate(&Launch {
        argv: &argv,
        env: None,
        cwd: Some(cwd),
        user: None,
    })?;
    let pty = nix::pty::openpty(None, None)
        .map_err(|e| error(AgentErrorCode::Io, format!("openpty: {e}")))?;
    cloexec(pty.master.as_raw_fd());
    cloexec(pty.slave.as_raw_fd());
    set_size(pty.master.as_raw_fd(), cols, rows);
    let (pid, exit) = start_shell(shared, &argv, cwd, pty.slave, user)?;
    let ended = shared.connections();
    tokio::spawn(async move {
        let bridged = async move {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => bridge(TokioIo::new(upgraded), pty.master, pid, exit).await,
                Err(_) => kill_group(pid, libc::SIGKILL),
            }
        };
        // Connections ended by the host (before a checkpoint) hang the shell up too.
        tokio::select! {
            () = bridged => {}
            () = ended.cancelled() => kill_group(pid, libc::SIGHUP),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(http::header::CONNECTION, "upgrade")
        .header(http::header::UPGRADE, UPGRADE)
        .body(body::full(bytes::Bytes::new()))
        .map_err(|e| error(AgentErrorCode::Io, format!("response: {e}")))
}

/// The shell in its own session with the PTY slave as stdio and controlling terminal.
fn start_shell(
    shared: &Arc<Shared>,
    argv: &[String],
    cwd: &str,
    slave: OwnedFd,
    user: Option<UserIds>,
) -> Result<(u32, oneshot::Receiver<Exit>), AgentError> {
    let stdio = |fd: &OwnedFd| fd.try_clone().map(Stdio::from).map_err(io_error("pty"));
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(&shared.config.default_env)
        .current_dir(cwd)
        .stdin(stdio(&slave)?)
        .stdout(stdio(&slave)?)
        .stderr(Stdio::from(slave));
    let confine = shared.config.confine.clone();
    spawn::may_set_oom_score();
    // SAFETY: the hook runs in the forked child and only issues syscalls (setsid,
    // ioctl, open, write, close, close_range, rlimits) plus the confinement, which is prepared before fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            spawn::command_defaults()?;
            if let Some(f) = &confine {
                f()?;
            }
            match &user {
                Some(user) => spawn::switch_user(user),
                None => Ok(()),
            }
        });
    }
    // The score is set under the reaper's lock (see `spawn::spawn`).
    let (child, exit) = reaper::spawn_with(|| {
        let child = cmd.spawn()?;
        spawn::neutral_oom_score_of(child.id());
        let pid = child.id() as i32;
        Ok((child, pid))
    })
    .map_err(|e| {
        error(
            AgentErrorCode::SpawnFailed,
            format!("cannot start a shell: {e}"),
        )
    })?;
    // Dropping the command closes our copies of the slave: only the shell and what it
    // starts hold it.
    drop(cmd);
    Ok((child.id(), exit))
}

/// Pumps PTY output to the connection and connection frames to the PTY; the shell's
/// exit ends it: what it left on the terminal is read without waiting, then an `Exit`
/// frame goes out and the connection closes. A client that goes away hangs the shell up.
///
/// The session ends on the shell's exit rather than on the master's EOF: under gVisor
/// (runsc 2022-12-19) a master read neither returns EOF once the slave is closed nor
/// wakes for the last output written before the close, so waiting for EOF hung the
/// session (and a blocking read held a thread for good). The master is read
/// non-blocking through the reactor instead, so nothing waits on it once the shell is
/// gone (processes the shell left on the terminal are cut off with it).
async fn bridge(
    io: TokioIo<hyper::upgrade::Upgraded>,
    master: OwnedFd,
    pid: u32,
    exit: oneshot::Receiver<Exit>,
) {
    let raw = master.as_raw_fd();
    // SAFETY: `Master` owns its descriptor and neither replaces nor closes it while the
    // `AsyncFd` holds it (it is closed when the `AsyncFd` is dropped, after deregistering).
    let master = match nonblocking(master)
        .and_then(|m| unsafe { AsyncFd::register(m) }.map_err(std::io::Error::from))
    {
        Ok(master) => master,
        Err(_) => return kill_group(pid, libc::SIGKILL),
    };
    let master = &master;
    let (mut rd, mut wr) = tokio::io::split(io);
    let out = async move {
        let mut frame = OutFrame::new();
        let mut exit = exit;
        let ended = loop {
            tokio::select! {
                read = read_master(master, frame.space()) => match read {
                    Ok(n @ 1..) => {
                        frame.filled(n);
                        // Whatever more is already there rides in the same frame: one
                        // write per burst of output rather than one per PTY read.
                        frame.fill_now(master.get_ref());
                        if wr.write_all(frame.take()).await.is_err() {
                            return;
                        }
                    }
                    // EOF or EIO: every holder of the slave is gone.
                    _ => break None,
                },
                ended = &mut exit => break Some(ended),
            }
        };
        // The output the shell left behind, as far as it can be read now.
        loop {
            frame.fill_now(master.get_ref());
            if frame.is_empty() {
                break;
            }
            if wr.write_all(frame.take()).await.is_err() {
                return;
            }
        }
        let ended = match ended {
            Some(ended) => ended,
            None => exit.await,
        };
        let code = match ended {
            Ok(Exit::Code(c)) => c,
            Ok(Exit::Signal(s)) => 128 + s,
            Err(_) => -1,
        };
        let _ = wr.write_all(&PtyFrame::Exit(code).encode()).await;
        let _ = wr.shutdown().await;
    };
    let inp = async move {
        let mut buf = BytesMut::new();
        while let Ok(1..) = rd.read_buf(&mut buf).await {
            loop {
                match PtyFrame::decode(&mut buf) {
                    Ok(Some(PtyFrame::Data(d))) => {
                        if write_master(master, &d).await.is_err() {
                            return;
                        }
                    }
                    Ok(Some(PtyFrame::Resize { cols, rows })) => set_size(raw, cols, rows),
                    Ok(Some(PtyFrame::Exit(_))) => {}
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
        }
    };
    tokio::select! {
        _ = out => {}
        _ = inp => {
            kill_group(pid, libc::SIGHUP);
            kill_group(pid, libc::SIGKILL);
        }
    }
}

/// The next `Data` frame to the host, its header and payload in one buffer (one write).
struct OutFrame {
    buf: Vec<u8>,
    len: usize,
}

/// Largest payload of one output frame (the PTY itself hands out at most a few KiB per
/// read; a burst is gathered up to this).
const OUT_PAYLOAD: usize = 64 * 1024;
const HEADER: usize = 5;

const _: () = assert!(OUT_PAYLOAD <= sandboxd_agent_protocol::pty::MAX_PAYLOAD);

impl OutFrame {
    fn new() -> Self {
        OutFrame {
            buf: vec![0; HEADER + OUT_PAYLOAD],
            len: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The unfilled part of the payload.
    fn space(&mut self) -> &mut [u8] {
        &mut self.buf[HEADER + self.len..]
    }

    fn filled(&mut self, n: usize) {
        self.len += n;
    }

    /// Reads what the master holds now, until it has nothing more or the frame is full.
    fn fill_now(&mut self, master: &Master) {
        while self.len < OUT_PAYLOAD {
            match master.read_now(self.space()) {
                Ok(n @ 1..) => self.filled(n),
                _ => break,
            }
        }
    }

    /// The encoded frame (as [`PtyFrame::Data`] encodes it); empties the payload.
    fn take(&mut self) -> &[u8] {
        let len = std::mem::take(&mut self.len);
        self.buf[0] = 0;
        self.buf[1..HEADER].copy_from_slice(&(len as u32).to_be_bytes());
        &self.buf[..HEADER + len]
    }
}

/// The PTY master, read and written without blocking.
struct Master(OwnedFd);

impl AsRawFd for Master {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl Master {
    /// One non-blocking read: `WouldBlock` when nothing is there.
    fn read_now(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        nix::unistd::read(self.0.as_raw_fd(), buf).map_err(std::io::Error::from)
    }

    fn write_now(&self, data: &[u8]) -> std::io::Result<usize> {
        nix::unistd::write(&self.0, data).map_err(std::io::Error::from)
    }
}

fn nonblocking(fd: OwnedFd) -> std::io::Result<Master> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let raw = fd.as_raw_fd();
    let flags = fcntl(raw, FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
    let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
    fcntl(raw, FcntlArg::F_SETFL(flags)).map_err(std::io::Error::from)?;
    Ok(Master(fd))
}

/// Reads what the master has once it is readable.
async fn read_master(master: &AsyncFd<Master>, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        let mut ready = master.readable().await?;
        match ready.try_io(|m| m.get_ref().read_now(buf)) {
            Ok(result) => return result,
            Err(_would_block) => continue,
        }
    }
}

/// Writes all of `data` to the master, waiting while its input queue is full.
async fn write_master(master: &AsyncFd<Master>, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        let mut ready = master.writable().await?;
        match ready.try_io(|m| m.get_ref().write_now(data)) {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => data = &data[n..],
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
    Ok(())
}
