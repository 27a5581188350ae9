//! `destroy`: kill everything in the sandbox's cgroup, then remove its cgroup, mounts,
//! state dir and id slot. Works from the handle alone and is idempotent.

use super::{disk, rootfs, sys, LinuxRuntime};
use crate::{faults, RuntimeError, SandboxHandle};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long destroy waits, in all, for its killed children to become reapable.
const REAP_TIMEOUT: Duration = Duration::from_secs(1);

pub(super) fn destroy(rt: &LinuxRuntime, handle: &SandboxHandle) -> Result<(), RuntimeError> {
    destroy_noting(rt, handle, || {})
}

/// [`destroy`], calling `emptied` as soon as no process of the sandbox is left (before
/// its cgroups, mounts and files go; not at all when some could not be killed).
pub(super) fn destroy_noting(
    rt: &LinuxRuntime,
    handle: &SandboxHandle,
    emptied: impl FnOnce(),
) -> Result<(), RuntimeError> {
    let id = handle.id;
    if rt.cgroups.is_frozen(id) {
        // SIGKILL is not delivered to frozen tasks on v1.
        rt.cgroups.set_frozen(id, false)?;
    }
    let mut killed = BTreeSet::new();
    if sys::is_same_live_process(handle.agent_pid, handle.agent_start_ticks) {
        let _ = kill(Pid::from_raw(handle.agent_pid), Signal::SIGKILL);
        killed.insert(handle.agent_pid);
    } else if sys::proc_stat(handle.agent_pid).is_some_and(|(_, t)| t == handle.agent_start_ticks) {
        // An agent that died on its own is a zombie of ours until reaped below.
        killed.insert(handle.agent_pid);
    }
    let deadline = Instant::now() + KILL_TIMEOUT;
    loop {
        let pids = rt.cgroups.procs(id);
        if pids.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(RuntimeError::Unsupported(format!(
                "sandbox {id} still has processes {pids:?}"
            )));
        }
        for pid in pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            killed.insert(pid);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    // The agent is our child when we are its subreaper: reap it (and any other of ours).
    // A task leaves its cgroup a moment before it becomes a zombie, so a single WNOHANG
    // wait can come too early and leave a zombie for good: wait (bounded) per process.
    let deadline = Instant::now() + REAP_TIMEOUT;
    for pid in killed {
        loop {
            match waitpid(
                Pid::from_raw(pid),
                Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
            ) {
                Ok(nix::sys::wait::WaitStatus::StillAlive) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(200));
                }
                _ => break, // reaped, not our child (ECHILD), or out of time
            }
        }
    }
    // A warm entry's cgroups keep its key until its start renames them, after its dir:
    // a start interrupted between the two (a crash) left them, and the sandbox's
    // processes, under that key; killed before `emptied` says none is left.
    if let Some(key) = super::warm::entry_key(&handle.state_dir).filter(|k| *k != id) {
        rt.cgroups.kill_and_remove(key)?;
    }
    emptied();
    faults::check("destroy.cgroup")?;
    rt.cgroups.remove(id)?;
    super::requests::remove(&rt.cgroups, id)?;
    faults::check("destroy.unmount")?;
    rootfs::unmount_root(&handle.state_dir)?;
    if rootfs::has_mounts_under(&handle.state_dir) {
        return Err(RuntimeError::Unsupported(format!(
            "mounts remain under {}",
            handle.state_dir.display()
        )));
    }
    disk::release(&handle.state_dir, rt.defer_disk_removal)?;
    faults::check("destroy.dir")?;
    match std::fs::remove_dir_all(&handle.state_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(RuntimeError::Io {
                what: "removing the sandbox state dir",
                path: handle.state_dir.clone(),
                source,
            })
        }
    }
    rt.slots.free(handle.host_id_base, id);
    Ok(())
}
