//! What a server killed in the middle of a restore from disk left: `runsc restore
//! --detach` had started the sentry in the sandbox's cgroup, but the handle still says
//! on disk (its image is still there). Nothing manages that sentry, and the next
//! restore would meet its runsc state; so at start-up it goes, and the sandbox is on
//! disk again, whole (the image is what a restore reads).

use super::{checkpoint, warm, GvisorRuntime};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How long the killed processes may take to leave the cgroup.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

/// For each sandbox in `keep` whose stored handle is on disk: kills whatever runs in its
/// cgroup and removes the runsc state of its container.
pub(super) fn clear(rt: &GvisorRuntime, keep: &HashSet<Uuid>) {
    for handle in rt.stored_handles() {
        if !keep.contains(&handle.id) || !checkpoint::on_disk(&handle) {
            continue;
        }
        let id = warm::runsc_id(&handle);
        let pids = rt.linux.cgroups.procs(handle.id);
        let files = rt.runsc.state_files(&id);
        if pids.is_empty() && files.is_empty() {
            continue;
        }
        tracing::warn!(sandbox = %handle.id, processes = pids.len(), "on disk with a restore left running: ending it");
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            let left = rt.linux.cgroups.procs(handle.id);
            if left.is_empty() || Instant::now() >= deadline {
                break;
            }
            for pid in left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Reaped (bounded) before runsc's state goes: a sentry or gofer still exiting
        // would meet the next restore.
        super::destroy::reap(&pids);
        rt.runsc.delete(&id);
        for file in rt.runsc.state_files(&id) {
            let _ = std::fs::remove_file(file);
        }
    }
}
