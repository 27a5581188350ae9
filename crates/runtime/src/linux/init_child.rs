//! A sandbox init's first process as the backend holds it: spawned (an exec of the
//! init binary, a `std::process::Child`) or forked from this very process
//! (`HeldInit::fork`); either is identified, killed and reaped the same way.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};

/// An init process this process started (its parent).
pub enum InitChild {
    Spawned(Child),
    /// Forked by this process with no exec: its PID, its status once reaped, and
    /// whether another wait reaped it first (a destroy's reap of the sandbox's cgroup:
    /// then its PID is no longer ours to signal).
    Forked {
        pid: i32,
        status: Option<ExitStatus>,
        lost: bool,
    },
}

impl From<Child> for InitChild {
    fn from(child: Child) -> InitChild {
        InitChild::Spawned(child)
    }
}

impl InitChild {
    /// A child just forked, not yet reaped.
    pub(super) fn forked(pid: i32) -> InitChild {
        InitChild::Forked {
            pid,
            status: None,
            lost: false,
        }
    }

    pub fn id(&self) -> u32 {
        match self {
            InitChild::Spawned(child) => child.id(),
            InitChild::Forked { pid, .. } => *pid as u32,
        }
    }

    /// SIGKILL, unless it was reaped already, here or elsewhere (as `Child::kill`: then
    /// nothing).
    pub fn kill(&mut self) -> io::Result<()> {
        match self {
            InitChild::Spawned(child) => child.kill(),
            InitChild::Forked {
                pid,
                status: None,
                lost: false,
            } => {
                // SAFETY: kill(2) on our own child, not reaped through this handle nor
                // seen reaped elsewhere (`lost`): std's `Child::kill` gives the same.
                match unsafe { libc::kill(*pid, libc::SIGKILL) } {
                    0 => Ok(()),
                    _ => Err(io::Error::last_os_error()),
                }
            }
            InitChild::Forked { .. } => Ok(()),
        }
    }

    /// Waits for its exit and reaps it (once: later calls give the same status).
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        match self {
            InitChild::Spawned(child) => child.wait(),
            InitChild::Forked {
                status: Some(done), ..
            } => Ok(*done),
            InitChild::Forked { pid, status, lost } => {
                let done = reap(*pid, 0, lost)?.ok_or_else(|| io::Error::other("no status"))?;
                *status = Some(done);
                Ok(done)
            }
        }
    }

    /// Its status if it exited (reaping it), `None` while it runs.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match self {
            InitChild::Spawned(child) => child.try_wait(),
            InitChild::Forked { pid, status, lost } => {
                if status.is_none() {
                    *status = reap(*pid, libc::WNOHANG, lost)?;
                }
                Ok(*status)
            }
        }
    }
}

/// waitpid(2) for `pid` with `flags`; `None` when WNOHANG found it running. `lost`
/// becomes true when it is no child of ours any more (ECHILD: reaped elsewhere).
fn reap(pid: i32, flags: libc::c_int, lost: &mut bool) -> io::Result<Option<ExitStatus>> {
    let mut raw = 0;
    loop {
        // SAFETY: waitpid(2) on our own child, writing its status into `raw`.
        match unsafe { libc::waitpid(pid, &mut raw, flags) } {
            0 => return Ok(None),
            n if n == pid => return Ok(Some(ExitStatus::from_raw(raw))),
            _ => {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ECHILD) {
                    *lost = true;
                }
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forks a child that runs `then` (async-signal-safe calls only: the test process
    /// has threads).
    fn forked(then: fn() -> !) -> InitChild {
        // SAFETY: the child calls only async-signal-safe functions (`then`).
        match unsafe { nix::unistd::fork() }.expect("fork") {
            nix::unistd::ForkResult::Child => then(),
            nix::unistd::ForkResult::Parent { child } => InitChild::forked(child.as_raw()),
        }
    }

    #[test]
    fn a_forked_child_is_reaped_once_and_killed_as_a_spawned_one() {
        // SAFETY: _exit(2) is async-signal-safe.
        let mut done = forked(|| unsafe { libc::_exit(7) });
        assert_eq!(done.wait().expect("wait").code(), Some(7));
        // Reaped: the status stays, and a kill does nothing (its PID may be reused).
        assert_eq!(done.wait().expect("wait again").code(), Some(7));
        assert_eq!(
            done.try_wait().expect("try_wait").and_then(|s| s.code()),
            Some(7)
        );
        done.kill().expect("kill after the reap");

        // SAFETY: pause(2) and _exit(2) are async-signal-safe.
        let mut running = forked(|| unsafe {
            libc::pause();
            libc::_exit(0)
        });
        assert!(running.try_wait().expect("try_wait").is_none(), "it runs");
        running.kill().expect("kill");
        let status = running.wait().expect("wait");
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(running.id() > 0);

        // Reaped by another wait (as a destroy reaps the sandbox's cgroup): the wait
        // fails, and a kill no longer signals that PID.
        // SAFETY: _exit(2) is async-signal-safe.
        let mut elsewhere = forked(|| unsafe { libc::_exit(3) });
        let pid = elsewhere.id() as i32;
        // SAFETY: waitpid(2) on this test's own child.
        assert_eq!(unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) }, pid);
        let lost = elsewhere.wait().expect_err("reaped elsewhere");
        assert_eq!(lost.raw_os_error(), Some(libc::ECHILD));
        elsewhere
            .kill()
            .expect("a kill of a child reaped elsewhere does nothing");
    }
}
