//! The signals that end a run, noted from the run's first step until its async
//! handlers (`run::Signals`) catch them: a Ctrl-C, a SIGTERM or the worker's
//! parent-death signal that comes while the backend opens and the early init is made
//! is kept for the run to act on (it ends the run cleanly), instead of killing the
//! worker with no teardown, which left that init's cgroups, entry dir and disk mount
//! behind. A handler, not a blocked mask: a mask would be inherited by every thread
//! started meanwhile and, through `Command` (which keeps the mask across fork and
//! exec), by every process they start, the sandbox's PID 1 included.

use anyhow::{Context, Result};
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use std::sync::atomic::{AtomicI32, Ordering};

/// The last signal noted before the run's handlers took over (0: none).
static NOTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(signo: libc::c_int) {
    // Async-signal-safe: one atomic store.
    NOTED.store(signo, Ordering::SeqCst);
}

/// Notes each of `signals` from now on, and unblocks them (a mask the caller passed
/// down would hold them, and go on to every thread and child). The run's own handlers
/// (tokio's, through signal-hook-registry) chain to this one rather than replace it:
/// a signal that comes while tokio has enabled its handler but not yet subscribed its
/// stream is dropped by tokio and only noted here, so this handler must stay installed
/// until [`take_noted`] has run. Called while the process has one thread.
pub fn note_from_now(signals: &[Signal]) -> Result<()> {
    let action = SigAction::new(
        SigHandler::Handler(note),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in signals {
        // SAFETY: `note` is async-signal-safe (one atomic store) and lives for the
        // whole process.
        unsafe { sigaction(*sig, &action) }.context("noting the signals that end the run")?;
    }
    let mut set = SigSet::empty();
    for sig in signals {
        set.add(*sig);
    }
    set.thread_unblock()
        .context("unblocking the signals that end the run")
}

/// The signal noted before the run's handlers took over, if one was (taken: asked once,
/// once those handlers are installed).
pub fn take_noted() -> Option<i32> {
    match NOTED.swap(0, Ordering::SeqCst) {
        0 => None,
        signo => Some(signo),
    }
}
