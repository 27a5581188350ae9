//! Pause to disk on gVisor: `runsc checkpoint` writes the sandbox's whole memory
//! (every process, the agent's rings) to an image in its state dir and the sandbox's
//! host processes end; `runsc restore` brings it back from the image over the same
//! root, which stays mounted meanwhile.
//!
//! The agent's socket is a host socket, which gVisor cannot save (a checkpoint that
//! meets one fails and ends the sandbox). So the agent lets go of it first: SIGUSR2
//! makes it close its listener and connections and write its verdict to
//! [`QUIESCED`](super::bundle::QUIESCED) (refusing when a process of the sandbox holds
//! another host socket); SIGUSR1 makes it listen again, after a restore or when the
//! checkpoint is given up. A sandbox on disk has a handle with no agent pid.
//!
//! A sandbox with egress keeps its network namespace, link, lease and rules while on
//! disk; its restore puts the address back on the link (runsc took it for the sentry's
//! stack at start) and runs as `runsc start` does (see `start::run_in_cgroup`), so the
//! restored sentry's stack takes the same address and route again.

use super::agent_dir::{self, Verdict};
use super::{start, GvisorRuntime};
use crate::linux::{io, rootfs, sys};
use crate::{RuntimeError, SandboxHandle};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the agent may take to let go of its socket.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the sandbox's host processes may take to end after a checkpoint.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The dir a sandbox's memory image is written to.
pub fn image_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("memory")
}

/// Whether the sandbox is paused to disk (its memory in an image, no process running).
pub fn on_disk(handle: &SandboxHandle) -> bool {
    handle.agent_pid == 0
        && image_dir(&handle.state_dir)
            .join("checkpoint.img")
            .is_file()
}

/// Why a sandbox on disk with egress can no longer be restored (its network's host
/// side did not survive: see [`crate::linux::net::netns::lost`]), or `None`.
pub fn network_lost(rt: &GvisorRuntime, handle: &SandboxHandle) -> Option<String> {
    let netns = handle.state_dir.join(rootfs::NETNS_FILE);
    if !netns.exists() {
        return None; // no egress
    }
    crate::linux::net::netns::lost(&rt.linux, handle.id, &netns)
}

/// Writes the sandbox's memory to disk and ends its host processes; returns its handle
/// on disk. When the sandbox cannot be checkpointed it keeps running and the error is
/// [`RuntimeError::CannotCheckpoint`].
pub(super) fn checkpoint(
    rt: &GvisorRuntime,
    handle: &SandboxHandle,
) -> Result<SandboxHandle, RuntimeError> {
    if on_disk(handle) {
        return Ok(handle.clone());
    }
    if let Some(why) = agent_dir::legacy(handle) {
        return Err(RuntimeError::CannotCheckpoint(why));
    }
    // What its cgroup must be made with again after a host restart (see `remount`).
    super::remount::save_limits(rt, handle)?;
    let id = super::warm::runsc_id(handle);
    // Frozen in memory: it runs a moment to let go of its socket.
    let was_frozen = rt.is_paused(handle);
    if was_frozen {
        rt.runsc.run(None, &["resume", &id])?;
    }
    // Until the checkpoint itself runs, a failure leaves the sandbox as it was: frozen
    // again when it was (else it would run while its owner has it paused).
    let image = match let_go(rt, handle) {
        Ok(image) => image,
        Err(err) => {
            if was_frozen {
                if let Err(again) = rt.runsc.run(None, &["pause", &id]) {
                    tracing::warn!(sandbox = %handle.id, error = %err, "checkpoint given up");
                    return Err(again);
                }
            }
            return Err(err);
        }
    };
    let mut sandbox = rt.linux.cgroups.procs(handle.id);
    sandbox.push(handle.agent_pid);
    let log = handle.state_dir.join("runsc.log");
    let image_arg = image.display().to_string();
    let saved = rt
        .runsc
        .run(Some(&log), &["checkpoint", "--image-path", &image_arg, &id]);
    // The sentry and the gofer end once the image is written (or saving failed).
    wait_exited(rt, handle);
    super::destroy::reap(&sandbox);
    if let Err(e) = saved {
        let _ = std::fs::remove_dir_all(&image);
        return Err(e);
    }
    rt.runsc.delete(&id);
    for file in rt.runsc.state_files(&id) {
        let _ = std::fs::remove_file(file);
    }
    // The image's page cache was charged to the sandbox: give it back.
    rt.linux.cgroups.reclaim(handle.id);
    let mut stored = handle.clone();
    stored.agent_pid = 0;
    stored.agent_start_ticks = 0;
    start::save_handle(&stored)?;
    Ok(stored)
}

/// Has the (running) agent let go of its socket and makes the memory image's dir;
/// returns the dir. On failure the agent listens again (when it let go).
fn let_go(rt: &GvisorRuntime, handle: &SandboxHandle) -> Result<PathBuf, RuntimeError> {
    if let Some(refused) = quiesce(rt, handle)? {
        relisten(rt, handle)?;
        return Err(RuntimeError::CannotCheckpoint(refused));
    }
    let image = image_dir(&handle.state_dir);
    let _ = std::fs::remove_dir_all(&image);
    let made = std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&image)
        .map_err(io("creating the memory image dir", &image));
    if let Err(err) = made {
        relisten(rt, handle)?;
        return Err(err);
    }
    Ok(image)
}

/// Starts the sandbox again from its memory image, every process where it was; returns
/// its running handle. On failure it stays on disk (a later restore may succeed).
pub(super) fn restore(
    rt: &GvisorRuntime,
    handle: &SandboxHandle,
) -> Result<SandboxHandle, RuntimeError> {
    if !on_disk(handle) {
        return Ok(handle.clone());
    }
    if let Some(why) = agent_dir::legacy(handle) {
        return Err(RuntimeError::AgentStart(format!("cannot restore: {why}")));
    }
    let id = super::warm::runsc_id(handle);
    let state = handle.state_dir.display().to_string();
    let image = image_dir(&handle.state_dir).display().to_string();
    let pid_file = handle.state_dir.join("sandbox.pid");
    let _ = std::fs::remove_file(&pid_file);
    let pid_arg = pid_file.display().to_string();
    let args = [
        "restore",
        "--detach",
        "--image-path",
        &image,
        "--bundle",
        &state,
        "--pid-file",
        &pid_arg,
        &id,
    ];
    // With egress it comes back in its own namespace, link, address and rules, which
    // stayed while it was on disk: its address goes back on the link for runsc to copy.
    let netns = handle.state_dir.join(rootfs::NETNS_FILE);
    let egress = netns.exists();
    if egress {
        if let Some(why) = network_lost(rt, handle) {
            return Err(RuntimeError::Network(format!("cannot restore: {why}")));
        }
        crate::linux::net::netns::readdress(&rt.linux, handle.id, &netns)?;
    }
    // After a host restart: its root mounted and its cgroup made again.
    super::remount::ensure(rt, handle)?;
    let mut live = handle.clone();
    let restored = start::run_in_cgroup(rt, handle.id, &handle.state_dir, &args, egress)
        .and_then(|()| relisten(rt, handle))
        .and_then(|()| start::attach(&mut live));
    if let Err(e) = restored {
        // Back to on disk: nothing of the attempt runs.
        for pid in rt.linux.cgroups.procs(handle.id) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let pids = rt.linux.cgroups.procs(handle.id);
        wait_exited(rt, handle);
        super::destroy::reap(&pids);
        rt.runsc.delete(&id);
        for file in rt.runsc.state_files(&id) {
            let _ = std::fs::remove_file(file);
        }
        return Err(e);
    }
    // The live handle is saved before the image goes: a crash between the two leaves
    // a running sandbox recorded as running (and an image its destroy removes), not a
    // handle on disk whose image is gone (which would look crashed).
    start::save_handle(&live)?;
    // A test's crash between the two.
    crate::faults::hit("restore.saved");
    let _ = std::fs::remove_dir_all(image_dir(&handle.state_dir));
    Ok(live)
}

/// The running handle a restore saved in the sandbox's state dir when it differs from
/// the recorded `handle` (a server killed after the restore, before recording it) and
/// that sandbox runs; the image the restore had not removed yet goes.
pub(super) fn restored(rt: &GvisorRuntime, handle: &SandboxHandle) -> Option<SandboxHandle> {
    let path = handle.state_dir.join("handle.json");
    let saved: SandboxHandle = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let same =
        (saved.agent_pid, saved.agent_start_ticks) == (handle.agent_pid, handle.agent_start_ticks);
    if same
        || saved.id != handle.id
        || saved.agent_pid == 0
        || !sys::is_same_live_process(saved.agent_pid, saved.agent_start_ticks)
        || !rt.linux.cgroups.holds(handle.id, saved.agent_pid)
    {
        return None;
    }
    tracing::warn!(sandbox = %handle.id, "restored before the server stopped, which did not record it: adopted running");
    let _ = std::fs::remove_dir_all(image_dir(&handle.state_dir));
    Some(saved)
}

/// Asks the agent to let go of its socket; returns `None` when it did, else why not
/// (in the host's words: the verdict file is the sandbox's, see [`agent_dir`]).
fn quiesce(rt: &GvisorRuntime, handle: &SandboxHandle) -> Result<Option<String>, RuntimeError> {
    agent_dir::remove_verdict(&handle.state_dir);
    rt.runsc
        .run(None, &["kill", &super::warm::runsc_id(handle), "USR2"])?;
    let deadline = Instant::now() + QUIESCE_TIMEOUT;
    // A test's "too late": the verdict comes, after the deadline.
    let late = crate::faults::hit("checkpoint.quiesce");
    loop {
        let verdict = agent_dir::read_verdict(&handle.state_dir);
        let given = verdict != Verdict::Pending;
        match verdict {
            Verdict::Ok if !late => return Ok(None),
            Verdict::Refused(why) if !late => return Ok(Some(why)),
            _ if given || Instant::now() >= deadline => {
                let _ = relisten(rt, handle);
                return Err(RuntimeError::CannotCheckpoint(
                    "the sandbox's agent did not let go of its socket in time".into(),
                ));
            }
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Makes the agent listen again and waits until it accepts. The old socket file goes
/// first, from the host: the gofer lets the sandbox bind host sockets but not walk to
/// them, so the agent cannot remove it itself. The new socket is adopted under the
/// host's own name (see [`agent_dir`]).
pub(super) fn relisten(rt: &GvisorRuntime, handle: &SandboxHandle) -> Result<(), RuntimeError> {
    agent_dir::forget_socket(&handle.state_dir);
    // A sandbox just restored may not take signals yet: its control server refuses
    // connections a moment after `restore --detach` returned, and (seen under load) a
    // signal it accepted that early can be lost. So the signal is sent again each
    // RESEND while the socket does not accept (the agent ignores a repeat: it drains
    // stale ones before it next waits for one).
    const RESEND: Duration = Duration::from_secs(1);
    let deadline = Instant::now() + QUIESCE_TIMEOUT;
    let id = super::warm::runsc_id(handle);
    loop {
        let sent = rt.runsc.run(None, &["kill", &id, "USR1"]);
        let until = (Instant::now() + RESEND).min(deadline);
        while sent.is_ok() && Instant::now() < until {
            if agent_dir::connectable(&handle.state_dir).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        if Instant::now() >= deadline {
            sent?;
            return Err(RuntimeError::AgentStart(format!(
                "agent socket {} does not accept after a restore",
                handle.agent_socket.display()
            )));
        }
        if sent.is_err() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Waits (bounded) until no process is left in the sandbox's cgroup and its sentry is
/// gone.
fn wait_exited(rt: &GvisorRuntime, handle: &SandboxHandle) {
    let deadline = Instant::now() + EXIT_TIMEOUT;
    while Instant::now() < deadline
        && (!rt.linux.cgroups.procs(handle.id).is_empty()
            || sys::is_same_live_process(handle.agent_pid, handle.agent_start_ticks))
    {
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub use crate::MemorySnapshot;

/// Takes a snapshot of `handle`'s memory and filesystem together (consistent: nothing
/// runs between the two) into `dest` (a new dir), and lets the sandbox go on as it was
/// (running, frozen, or on disk); returns the snapshot, or why not, and the sandbox's
/// handle now. When the capture fails `dest` is removed; when the restore after it
/// fails the sandbox stays on disk (its handle says so) and `dest` is removed too: no
/// snapshot is returned, so nothing would ever delete it.
pub(super) fn snapshot(
    rt: &GvisorRuntime,
    handle: &SandboxHandle,
    dest: &Path,
) -> (Result<MemorySnapshot, RuntimeError>, SandboxHandle) {
    let (taken, now) = snapshot_steps(rt, handle, dest);
    if taken.is_err() {
        let _ = std::fs::remove_dir_all(dest);
    }
    (taken, now)
}

fn snapshot_steps(
    rt: &GvisorRuntime,
    handle: &SandboxHandle,
    dest: &Path,
) -> (Result<MemorySnapshot, RuntimeError>, SandboxHandle) {
    use crate::Runtime;
    let was_on_disk = on_disk(handle);
    let was_frozen = !was_on_disk && rt.is_paused(handle);
    let stored = match checkpoint(rt, handle) {
        Ok(stored) => stored,
        // Not checkpointed: it goes on as it was.
        Err(e) => return (Err(e), handle.clone()),
    };
    let taken = (|| {
        let layer = rt.capture_layer(&stored)?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dest)
            .map_err(io("creating the memory snapshot dir", dest))?;
        let from = image_dir(&stored.state_dir).join("checkpoint.img");
        let to = dest.join("checkpoint.img");
        // The same filesystem (the data dir): a link, not a copy.
        std::fs::hard_link(&from, &to)
            .or_else(|_| std::fs::copy(&from, &to).map(|_| ()))
            .map_err(io("keeping the memory image", &to))?;
        Ok(MemorySnapshot {
            layer,
            image: dest.to_path_buf(),
        })
    })();
    if was_on_disk {
        return (taken, stored);
    }
    let restored =
        crate::faults::check("snapshot_memory.restore").and_then(|()| restore(rt, &stored));
    let live = match restored {
        Ok(live) => live,
        Err(e) => {
            tracing::error!(id = %handle.id, error = %e, "a sandbox snapshotted with its memory did not come back; it stays on disk");
            return (taken.and(Err(e)), stored);
        }
    };
    if was_frozen {
        // It was paused in memory: it stays so (the restore started it).
        if let Err(e) = rt
            .runsc
            .run(None, &["pause", &super::warm::runsc_id(&live)])
        {
            return (taken.and(Err(e)), live);
        }
    }
    (taken, live)
}
