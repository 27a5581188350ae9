//! Starting a sandbox from a parked warm init: its PID 1 already waits in its root and
//! namespaces (see `warm`), so the start only names its cgroup after the sandbox, sets
//! its limits, and sends its hostname; PID 1 answers `Ready` and confines itself.

use super::cgroup::Limits;
use super::handshake::Msg;
use super::start::expect;
use super::warm::Warm;
use super::LinuxRuntime;
use crate::{RuntimeError, SandboxHandle, SandboxSpec};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Takes `warm` (parked, its dir already renamed to the sandbox's state dir) into the
/// sandbox of `spec`; on success `handle` names its agent. On failure the caller's
/// clean-up of the state dir ends PID 1 (the handle names it from the first step).
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
    let log = handle.state_dir.join("init.log");
    warm.channel
        .send(&Msg::Start(spec.hostname.clone()))
        .map_err(|e| RuntimeError::AgentStart(e.to_string()))?;
    expect(&warm.channel, &log, |m| {
        matches!(m, Msg::Ready).then_some(())
    })
}
