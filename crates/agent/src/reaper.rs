//! The one process-wide child reaper: a SIGCHLD-driven `waitpid(-1, WNOHANG)` loop that
//! hands each exit status to whoever registered the PID and discards the rest (orphans
//! re-parented to PID 1). Several agents in one process share it. A serving agent reaps
//! on its own runtime's thread ([`InRuntime`]): the exit reaches the command's waiter
//! without a hop through another thread (two context switches less per command). A small
//! dedicated thread reaps otherwise (nothing serving), and once a second as a safety net.

use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use tokio::sync::oneshot;

/// Runtimes reaping on SIGCHLD themselves ([`InRuntime`]): while there is one, the signal
/// does not wake the reaper's thread. Process-wide, as the thread is: in a process of
/// several runtimes (tests), one that holds an `InRuntime` and does not poll it leaves
/// the others' children to the thread's once-a-second look. An agent has one runtime.
static IN_RUNTIME: AtomicUsize = AtomicUsize::new(0);

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Code(i32),
    Signal(i32),
}

struct Reaper {
    waiters: Mutex<HashMap<i32, oneshot::Sender<Exit>>>,
}

static REAPER: OnceLock<Result<Reaper, String>> = OnceLock::new();

fn reaper() -> io::Result<&'static Reaper> {
    REAPER
        .get_or_init(|| start().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| io::Error::other(format!("cannot start the reaper: {e}")))
}

/// Starts the reaper now rather than at the first spawn (see [`crate::prepare_first_command`]).
pub(crate) fn start_early() -> io::Result<()> {
    reaper().map(drop)
}

fn start() -> io::Result<Reaper> {
    let (rx, tx) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
    let wake = tx.as_raw_fd();
    // SAFETY: the handler only loads a lock-free atomic and calls write(2), both
    // async-signal-safe; the write end lives for the rest of the process (leaked below).
    unsafe {
        signal_hook_registry::register(libc::SIGCHLD, move || {
            if IN_RUNTIME.load(Ordering::Relaxed) == 0 {
                libc::write(wake, [0u8].as_ptr().cast(), 1);
            }
        })?;
    }
    std::mem::forget(tx);
    std::thread::Builder::new()
        .name("agent-reaper".into())
        .stack_size(64 * 1024)
        .spawn(move || reap_forever(rx))?;
    Ok(Reaper {
        waiters: Mutex::new(HashMap::new()),
    })
}

fn reap_forever(wake: OwnedFd) -> ! {
    let mut buf = [0u8; 64];
    loop {
        reap_all();
        let mut pfd = libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd. The timeout is a safety net should a wake-up be lost.
        unsafe { libc::poll(&mut pfd, 1, 1000) };
        // SAFETY: draining our own non-blocking pipe into a local buffer.
        while unsafe { libc::read(wake.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

/// Reaps every zombie child. Each is first only *peeked at* (`WNOWAIT`), then reaped
/// under the waiters lock: a child whose spawn is still in progress (lock held) is left
/// to its spawner, which reaps it itself when `exec` fails.
fn reap_all() {
    let Ok(r) = reaper() else { return };
    loop {
        let Some(pid) = peek_zombie() else { return };
        let mut waiters = crate::shared::lock(&r.waiters);
        let exit = match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => Exit::Code(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => Exit::Signal(sig as i32),
            Ok(WaitStatus::StillAlive) => return,
            // Reaped by someone else meanwhile (a failed spawn), or a stop/continue.
            Ok(_) | Err(_) => continue,
        };
        if let Some(tx) = waiters.remove(&pid) {
            let _ = tx.send(exit);
        }
    }
}

/// Reaping on the current runtime's thread: [`InRuntime::reaped`] completes once a
/// SIGCHLD came and every exited child was reaped. While one exists the reaper's thread
/// is not woken by the signal (it still looks once a second).
pub(crate) struct InRuntime {
    sigchld: tokio::signal::unix::Signal,
}

impl InRuntime {
    /// `None` when the runtime cannot listen for SIGCHLD (the thread reaps, as before).
    pub(crate) fn start() -> Option<Self> {
        reaper().ok()?;
        let sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
            .inspect_err(|e| tracing::debug!(error = %e, "reaping on the reaper's thread"))
            .ok()?;
        IN_RUNTIME.fetch_add(1, Ordering::SeqCst);
        Some(Self { sigchld })
    }

    /// Waits for a SIGCHLD, then reaps every exited child (cancel-safe: a signal that
    /// came meanwhile is seen by the next call); `None` when no signal can come any more.
    async fn reaped(&mut self) -> Option<()> {
        self.sigchld.recv().await?;
        reap_all();
        Some(())
    }
}

/// [`InRuntime::reaped`], or `None` at once without one (a `select!` branch then off).
/// One whose signals ended is dropped: the thread reaps again.
pub(crate) async fn reaped(reaping: &mut Option<InRuntime>) -> Option<()> {
    let reaped = reaping.as_mut()?.reaped().await;
    if reaped.is_none() {
        *reaping = None;
    }
    reaped
}

impl Drop for InRuntime {
    fn drop(&mut self) {
        IN_RUNTIME.fetch_sub(1, Ordering::SeqCst);
        // A SIGCHLD that came after the last `reaped` is the thread's now.
        reap_all();
    }
}

/// The PID of some exited, not yet reaped child, without reaping it.
fn peek_zombie() -> Option<i32> {
    // SAFETY: waitid fills a zeroed siginfo_t we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_ALL, 0, &mut info, flags) != 0 {
            return None;
        }
        let pid = info.si_pid();
        (pid > 0).then_some(pid)
    }
}

/// Runs `start`, which starts a child and returns it with its PID, and registers the
/// PID before the reaper can see it exit: the waiters lock is held across the start, so
/// no status is ever lost or stolen. A `start` that fails reaps its child itself.
pub(crate) fn spawn_with<T>(
    start: impl FnOnce() -> io::Result<(T, i32)>,
) -> io::Result<(T, oneshot::Receiver<Exit>)> {
    let r = reaper()?;
    let mut waiters = r
        .waiters
        .lock()
        .map_err(|_| io::Error::other("reaper lock poisoned"))?;
    let (child, pid) = start()?;
    let (tx, rx) = oneshot::channel();
    waiters.insert(pid, tx);
    Ok((child, rx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

    /// Spawns `cmd` and registers its PID before the reaper can see it exit.
    fn spawn(cmd: &mut Command) -> io::Result<(Child, oneshot::Receiver<Exit>)> {
        spawn_with(|| {
            let child = cmd.spawn()?;
            let pid = child.id() as i32;
            Ok((child, pid))
        })
    }

    #[test]
    fn delivers_exit_codes_and_signals() {
        let _children = crate::children_test_lock();
        let (_c, rx) = spawn(Command::new("/bin/sh").args(["-c", "exit 3"])).unwrap();
        assert_eq!(rx.blocking_recv().unwrap(), Exit::Code(3));
        let (_c, rx) = spawn(Command::new("/bin/sh").args(["-c", "kill -9 $$"])).unwrap();
        assert_eq!(rx.blocking_recv().unwrap(), Exit::Signal(9));
    }

    #[test]
    fn failed_spawns_are_left_to_the_spawner_in_a_busy_process() {
        let _children = crate::children_test_lock();
        // Children exiting all the time while exec keeps failing: std's spawn reaps the
        // failed child itself and must never find it stolen.
        let busy: Vec<_> = (0..20)
            .map(|_| {
                spawn(Command::new("/bin/sh").args(["-c", "exit 0"]))
                    .unwrap()
                    .1
            })
            .collect();
        for _ in 0..50 {
            assert!(spawn(&mut Command::new("/no/such/binary")).is_err());
        }
        for rx in busy {
            assert_eq!(rx.blocking_recv().unwrap(), Exit::Code(0));
        }
    }
}
