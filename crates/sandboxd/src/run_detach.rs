//! `sandboxd run` returns as soon as its command is done: the process the caller waits
//! for forks a worker at once (while still single-threaded) and only relays, forwarding
//! SIGINT/SIGTERM/SIGHUP/SIGQUIT to the worker (those it ignores, as under `nohup` or a
//! script's `&`, stay ignored by both); the worker creates the sandbox, runs the
//! command, passes its output through, then [`HandOff::finish`]es: its stdio goes to
//! /dev/null, it leaves the caller's session, and the status byte goes to the waiting
//! process, which exits with it. The worker then tears the sandbox down on its own (the
//! wait for the kernel to end the killed PID 1 and its namespaces is no longer the
//! caller's). A worker killed before it finished is swept by the next run
//! (the owner mark of its sandbox: `run_orphans`).

use anyhow::{Context, Result};
use nix::sys::signal::{kill, raise, signal, SigHandler, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The signals the waiting process passes on to the worker.
const FORWARDED: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// The worker's parent-death signal: its own, always handled (whatever the caller
/// ignores, SIGTERM included), it ends the command and its sandbox as SIGTERM would.
pub const DEATH: Signal = Signal::SIGUSR2;

/// The worker's end of the status pipe.
pub struct HandOff {
    status: File,
}

/// Whether this process ignores `sig` (SIG_IGN, as `nohup` and a non-interactive
/// shell's `&` leave SIGHUP, SIGINT and SIGQUIT): such a signal is neither forwarded
/// nor caught, so the run lives on as its caller asked.
pub fn ignored(sig: Signal) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `old`,
    // a zeroed plain C struct we own.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: see above; `sig` is a valid signal number.
    let rc = unsafe { libc::sigaction(sig as libc::c_int, std::ptr::null(), &mut old) };
    rc == 0 && old.sa_sigaction == libc::SIG_IGN
}

/// The forwarded signals this process does not ignore.
pub fn honoured() -> Vec<Signal> {
    FORWARDED.into_iter().filter(|s| !ignored(*s)).collect()
}

fn set_of(signals: &[Signal]) -> SigSet {
    let mut set = SigSet::empty();
    for s in signals {
        set.add(*s);
    }
    set
}

/// The signals that end a run: the forwarded ones this process does not ignore, and
/// [`DEATH`].
pub fn ending_signals() -> Vec<Signal> {
    let mut all = honoured();
    all.push(DEATH);
    all
}

/// Forks. In the caller's process this never returns: it exits with the status byte the
/// worker hands over, or as the worker ended when it handed none (an error, a signal).
/// Returns in the worker. Must be called while the process has one thread.
pub fn split() -> Result<HandOff> {
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("making the status pipe")?;
    // Read before blocking: a blocked signal is queued even when it is ignored.
    let forwarded = set_of(&honoured());
    // Blocked before the fork, so none arriving meanwhile is lost or kills the waiter.
    forwarded
        .thread_block()
        .context("blocking the forwarded signals")?;
    let parent = nix::unistd::getpid();
    // SAFETY: the process is single-threaded here (`run::main` calls this first), so
    // the child may run any code.
    match unsafe { fork() }.context("forking the run's worker")? {
        ForkResult::Child => {
            drop(read);
            // The waiting process killed outright (-9) ends the command as a SIGTERM
            // would, even when the caller ignores SIGTERM: the worker's own [`DEATH`]
            // signal (not ignored, whatever the caller's dispositions). Its death before
            // this call shows as a new parent. Noted, like the forwarded ones, until the
            // run's handlers catch them (`run_signals_early`).
            crate::run_signals_early::note_from_now(&ending_signals())?;
            nix::sys::prctl::set_pdeathsig(DEATH).context("the worker's death signal")?;
            if nix::unistd::getppid() != parent {
                let _ = raise(DEATH);
            }
            Ok(HandOff {
                status: File::from(write),
            })
        }
        ForkResult::Parent { child } => {
            drop(write);
            wait_and_exit(read, child, forwarded)
        }
    }
}

/// The waiting process: relays signals until the status byte (or the worker's end).
fn wait_and_exit(read: OwnedFd, worker: Pid, forwarded: SigSet) -> ! {
    let code = relay(read, worker, &forwarded).unwrap_or(1);
    std::process::exit(code)
}

fn relay(read: OwnedFd, worker: Pid, forwarded: &SigSet) -> Result<i32> {
    let signals = SignalFd::with_flags(forwarded, SfdFlags::SFD_CLOEXEC)?;
    let mut status = File::from(read);
    let mut forwarded_last = None;
    loop {
        let mut fds = [
            nix::poll::PollFd::new(status.as_fd(), nix::poll::PollFlags::POLLIN),
            nix::poll::PollFd::new(signals.as_fd(), nix::poll::PollFlags::POLLIN),
        ];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
        let signalled = fds[1].any().unwrap_or(false);
        let ready = fds[0].any().unwrap_or(false);
        if signalled {
            if let Some(info) = signals.read_signal()? {
                if let Ok(sig) = Signal::try_from(info.ssi_signo as i32) {
                    let _ = kill(worker, sig);
                    forwarded_last = Some(sig);
                }
            }
        }
        if ready {
            let mut byte = [0u8; 1];
            let n = loop {
                match status.read(&mut byte) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    other => break other?,
                }
            };
            if n == 1 {
                let code = i32::from(byte[0]);
                match forwarded_last {
                    // Ended by the signal it was sent: end by it too, as before the
                    // split (a shell running a script stops on its Ctrl-C then).
                    Some(sig) if code == 128 + sig as i32 => return Ok(die_by(sig)),
                    _ => return Ok(code),
                }
            }
            return Ok(worker_end(worker));
        }
    }
}

/// The worker ended without handing a status over: end the same way.
fn worker_end(worker: Pid) -> i32 {
    match waitpid(worker, None) {
        Ok(WaitStatus::Exited(_, code)) => code,
        Ok(WaitStatus::Signaled(_, sig, _)) => die_by(sig),
        _ => 1,
    }
}

/// Ends this process by `sig` (its default action), else with 128 + its number. Never
/// with a core dump (SIGQUIT's default): the caller asked the run to end, not for a
/// core of this relay.
fn die_by(sig: Signal) -> i32 {
    use nix::sys::resource::{setrlimit, Resource};
    let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
    // SAFETY: restoring the default action of a signal; no handler is installed.
    let _ = unsafe { signal(sig, SigHandler::SigDfl) };
    let mut set = SigSet::empty();
    set.add(sig);
    let _ = raise(sig);
    let _ = set.thread_unblock();
    128 + sig as i32
}

impl HandOff {
    /// Gives the waiting process the status byte `code`, after moving the worker's stdio
    /// to /dev/null (a pipe reading the run's output sees its end now) and out of the
    /// caller's session (its terminal's signals no longer reach the teardown).
    pub fn finish(self, code: u8) {
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        if let Ok(null) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
        {
            for fd in 0..=2 {
                // SAFETY: dup2 of an fd we own onto the standard fds.
                unsafe { libc::dup2(null.as_raw_fd(), fd) };
            }
        }
        let _ = nix::unistd::setsid();
        // The waiting process exits once it has the status: that must not end us.
        let _ = nix::sys::prctl::set_pdeathsig(None);
        let mut status = self.status;
        let _ = status.write_all(&[code]);
    }
}
