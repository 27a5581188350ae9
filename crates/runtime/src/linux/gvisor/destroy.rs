//! `destroy` on gVisor: kill the sentry and gofer through the sandbox's cgroup, reap
//! them, drop runsc's state, unmount the root (and the netns file), remove the state
//! dir, and remove the network's link, rules and lease. Works from the
//! handle alone and is idempotent.

use super::GvisorRuntime;
use crate::linux::{disk, rootfs};
use crate::{RuntimeError, SandboxHandle};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// How long destroy waits, in all, for the processes it killed to become reapable.
const REAP_TIMEOUT: Duration = Duration::from_secs(2);

pub(super) fn destroy(rt: &GvisorRuntime, handle: &SandboxHandle) -> Result<(), RuntimeError> {
    let id = handle.id;
    let cgroups = &rt.linux.cgroups;
    if cgroups.is_frozen(id) {
        cgroups.set_frozen(id, false)?;
    }
    // A warm sandbox's cgroups keep its entry's key until its hand-over renames them,
    // after its dir: a hand-over a crash interrupted between the two left them so.
    let key = super::warm::runsc_id_in(&handle.state_dir)
        .and_then(|k| uuid::Uuid::parse_str(&k).ok())
        .filter(|k| *k != id);
    let mut killed = cgroups.procs(id);
    killed.extend(key.map(|k| cgroups.procs(k)).unwrap_or_default());
    if handle.agent_pid > 0 {
        killed.push(handle.agent_pid);
    }
    // SIGKILL ends even a paused (ptrace-stopped) sentry; runsc's own state goes next.
    cgroups.kill_and_remove(id)?;
    if let Some(key) = key {
        cgroups.kill_and_remove(key)?;
    }
    reap(&killed);
    let name = super::warm::runsc_id(handle);
    rt.runsc.delete(&name);
    for file in rt.runsc.state_files(&name) {
        let _ = match file.is_dir() {
            true => std::fs::remove_dir_all(&file),
            false => std::fs::remove_file(&file),
        };
    }
    // The network (link, rules, lease) goes whatever happens to the files, so that a
    // destroy failing on a mount leaves no lease behind; the first error is returned.
    let files = remove_files(handle);
    // Its network stack (gVisor's own) is not known to stay quiet: its flows are
    // always forgotten.
    let network = crate::linux::net::detach(&rt.linux, id, false);
    let done = files.and(network);
    if let (Ok(()), Some(tethers)) = (&done, &rt.linux.tethers) {
        tethers.release(id);
    }
    done
}

/// The root's mounts (and the netns file), the disk and the state dir.
fn remove_files(handle: &SandboxHandle) -> Result<(), RuntimeError> {
    // An adopted sandbox of the old agent-dir layout has immutable files.
    super::legacy::release(&handle.state_dir);
    rootfs::unmount_root(&handle.state_dir)?;
    if rootfs::has_mounts_under(&handle.state_dir) {
        return Err(RuntimeError::Unsupported(format!(
            "mounts remain under {}",
            handle.state_dir.display()
        )));
    }
    disk::release(&handle.state_dir, false)?;
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
    Ok(())
}

/// Reaps those of `pids` that are our children (the sentry and gofer are: runsc create
/// exits and we are the subreaper), each waited for a bounded while.
pub(super) fn reap(pids: &[i32]) {
    let deadline = Instant::now() + REAP_TIMEOUT;
    for &pid in pids {
        loop {
            match waitpid(
                Pid::from_raw(pid),
                Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
            ) {
                Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                _ => break,
            }
        }
    }
}
