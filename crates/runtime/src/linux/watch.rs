//! Watching an agent for its exit through a pidfd: it works for agents we started and
//! for agents re-adopted after a restart (which are not our children) alike.

use super::sys;
use crate::{ExitWatch, SandboxHandle};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

/// A pidfd of the handle's agent, or `Exited` when that process is gone (its PID
/// unused, reused by another process, or a zombie).
pub(super) fn watch_exit(handle: &SandboxHandle) -> ExitWatch {
    let Some(pid) = Pid::from_raw(handle.agent_pid) else {
        return ExitWatch::Exited;
    };
    match pidfd_open(pid, PidfdFlags::empty()) {
        // Checked after opening: the pidfd then refers to the agent itself, not to a
        // process that took its PID afterwards.
        Ok(fd) if sys::is_same_live_process(handle.agent_pid, handle.agent_start_ticks) => {
            ExitWatch::Readable(fd)
        }
        Ok(_) => ExitWatch::Exited,
        Err(rustix::io::Errno::SRCH) => ExitWatch::Exited,
        Err(e) => {
            tracing::warn!(sandbox = %handle.id, error = %e, "cannot watch the agent");
            ExitWatch::Unsupported
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn handle_of(pid: i32) -> SandboxHandle {
        SandboxHandle {
            id: uuid::Uuid::nil(),
            agent_pid: pid,
            agent_start_ticks: sys::proc_stat(pid).map_or(0, |(_, t)| t),
            agent_socket: PathBuf::new(),
            state_dir: PathBuf::new(),
            host_id_base: 0,
            warm: false,
            isolation: Default::default(),
        }
    }

    #[test]
    fn a_pidfd_turns_readable_when_the_process_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .expect("spawn sleep");
        let handle = handle_of(child.id() as i32);
        let ExitWatch::Readable(fd) = watch_exit(&handle) else {
            panic!("a live child is watchable");
        };
        let readable = |timeout: u16| {
            let mut fds = [nix::poll::PollFd::new(
                std::os::fd::AsFd::as_fd(&fd),
                nix::poll::PollFlags::POLLIN,
            )];
            nix::poll::poll(&mut fds, timeout).expect("poll") == 1
        };
        assert!(!readable(0), "readable while the process runs");
        child.kill().expect("kill");
        assert!(readable(10_000), "not readable after the exit");
        child.wait().expect("reap");
        assert!(matches!(watch_exit(&handle), ExitWatch::Exited));
    }
}
