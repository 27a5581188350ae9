//! Re-adoption of a sandbox whose move to disk, or back from it, the server did not
//! record before it stopped (the checkpoint or restore finished, the record still
//! names the sentry before it).

use crate::convert::Entry;
use crate::state::SandboxStatus;
use sandboxd_runtime::{Runtime, SandboxHandle};
use time::OffsetDateTime;

/// If `e` is RUNNING, its recorded sentry is gone and its memory image is on disk,
/// records it as moved to disk (the next operation wakes it); returns whether it did.
pub(crate) fn recover_on_disk(rt: &dyn Runtime, e: &mut Entry) -> bool {
    let Some(handle) = e.handle.as_ref() else {
        return false;
    };
    if e.sb.status != SandboxStatus::Running || handle.agent_pid == 0 || rt.is_alive(handle) {
        return false;
    }
    let on_disk = SandboxHandle {
        agent_pid: 0,
        agent_start_ticks: 0,
        ..handle.clone()
    };
    if !rt.is_checkpointed(&on_disk) {
        return false;
    }
    e.handle = Some(on_disk);
    e.sb.auto_paused_at = Some(OffsetDateTime::now_utc());
    true
}

/// If a restore of `e` finished but was not recorded (the record still names the
/// handle before it, on disk or a sentry since replaced), records the running handle
/// the runtime saved; returns whether it did.
pub(crate) fn recover_restored(rt: &dyn Runtime, e: &mut Entry) -> bool {
    let Some(live) = e.handle.as_ref().and_then(|h| rt.restored(h)) else {
        return false;
    };
    e.handle = Some(live);
    e.sb.auto_paused_at = None;
    true
}
