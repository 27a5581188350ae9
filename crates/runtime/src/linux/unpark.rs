//! Starting a sandbox from a parked warm init: its PID 1 already serves in its root and
//! namespaces (see `warm`), so the start only names its cgroup after the sandbox, sets
//! its limits and hostname, and tells it that it is no longer a warm init.

use super::cgroup::Limits;
use super::handshake::Msg;
use super::warm::Warm;
use super::{sys, LinuxRuntime};
use crate::{RuntimeError, SandboxHandle, SandboxSpec};
use nix::sched::CloneFlags;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Takes `warm` (parked, its dir already renamed to the sandbox's state dir) into the
/// sandbox of `spec`; `handle` names its agent from the first step, so on failure the
/// caller's clean-up of the sandbox ends it.
pub(super) fn unpark(
    rt: &LinuxRuntime,
    spec: &SandboxSpec,
    handle: &mut SandboxHandle,
    warm: Warm,
) -> Result<(), RuntimeError> {
    let Some((pid1, ticks)) = warm.parked else {
        return Err(RuntimeError::AgentStart(
            "the warm init is not parked".into(),
        ));
    };
    handle.agent_pid = pid1;
    handle.agent_start_ticks = ticks;
    // A test's pause between the dir's rename (done) and the cgroups' (as a cold one's).
    let _ = crate::faults::hit("start.warm_dir");
    if let Err(e) = rt.cgroups.rename(warm.key, spec.id) {
        // Still in the entry's cgroup: end it there.
        let _ = kill(Pid::from_raw(pid1), Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid1), None);
        let _ = rt.cgroups.remove(warm.key);
        return Err(e);
    }
    rt.cgroups.set_limits(
        spec.id,
        Limits {
            vcpu: spec.vcpu,
            memory_mb: spec.memory_mb,
            pids_max: spec.pids_max,
        },
    )?;
    set_hostname(pid1, &spec.hostname)?;
    super::bounds::limit_open_files(pid1, spec.pids_max)?;
    warm.channel
        .send(&Msg::Start)
        .map_err(|e| RuntimeError::AgentStart(format!("starting a parked agent: {e}")))?;
    // A tethered PID 1 (a run's early init) keeps watching the handshake: kept open
    // while this process lives.
    if let Some(tethers) = &rt.tethers {
        tethers.hold(spec.id, warm.channel);
    }
    Ok(())
}

/// Sets the hostname in the UTS namespace of `pid` (from a thread of ours that joins it).
fn set_hostname(pid: i32, name: &str) -> Result<(), RuntimeError> {
    let uts = CloneFlags::CLONE_NEWUTS;
    sys::on_thread_in_namespace(pid, "uts", uts, RuntimeError::AgentStart, || {
        nix::unistd::sethostname(name)
            .map_err(|e| RuntimeError::AgentStart(format!("setting the hostname: {e}")))
    })
}
