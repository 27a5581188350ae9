//! A sandbox init's first process as the backend holds it: spawned (an exec of the
//! init binary, a `std::process::Child`) or forked from this very process
//! (`HeldInit::fork`); either is identified, killed and reaped the same way.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};

/// An init process this process started (its parent).
pub enum InitChild {
    Spawned(Child),
    /// Forked by this process with no exec: its PID, and its status once reaped.
    Forked {
        pid: i32,
        status: Option<ExitStatus>,
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
        InitChild::Forked { pid, status: None }
    }

    pub fn id(&self) -> u32 {
        match self {
            InitChild::Spawned(child) => child.id(),
            InitChild::Forked { pid, .. } => *pid as u32,
        }
    }

    /// SIGKILL, unless it was reaped already (as `Child::kill`: then nothing).
    pub fn kill(&mut self) -> io::Result<()> {
        match self {
            InitChild::Spawned(child) => child.kill(),
            InitChild::Forked {
                status: Some(_), ..
            } => Ok(()),
            InitChild::Forked { pid, status: None } => {
                // SAFETY: kill(2) on our own child, not reaped yet (its PID is not reused).
                match unsafe { libc::kill(*pid, libc::SIGKILL) } {
                    0 => Ok(()),
                    _ => Err(io::Error::last_os_error()),
                }
            }
        }
    }

    /// Waits for its exit and reaps it (once: later calls give the same status).
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        match self {
            InitChild::Spawned(child) => child.wait(),
            InitChild::Forked { pid, status } => match status {
                Some(done) => Ok(*done),
                None => {
                    let done = reap(*pid, 0)?.ok_or_else(|| io::Error::other("no status"))?;
                    *status = Some(done);
                    Ok(done)
                }
            },
        }
    }

    /// Its status if it exited (reaping it), `None` while it runs.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match self {
            InitChild::Spawned(child) => child.try_wait(),
            InitChild::Forked { pid, status } => {
                if status.is_none() {
                    *status = reap(*pid, libc::WNOHANG)?;
                }
                Ok(*status)
            }
        }
    }
}

/// waitpid(2) for `pid` with `flags`; `None` when WNOHANG found it running.
fn reap(pid: i32, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    let mut raw = 0;
    loop {
        // SAFETY: waitpid(2) on our own child, writing its status into `raw`.
        match unsafe { libc::waitpid(pid, &mut raw, flags) } {
            0 => return Ok(None),
            n if n == pid => return Ok(Some(ExitStatus::from_raw(raw))),
            _ => {
                let e = io::Error::last_os_error();
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
    }
}
