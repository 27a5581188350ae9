//! Start-up reconciliation: removes every sandbox this data directory holds that no
//! live record claims: a start a crash interrupted (dir, mounts, loop device, cgroups,
//! slot, network lease), and any agent it left running (found through its cgroup).
//!
//! A sandbox whose owner mark a live `sandboxd run` holds (see `tether`) is that run's.
//! Only `sandboxes/<uuid>` directories are looked at: the cgroup parent and the network
//! state are shared with other servers on the host, so what they hold is only removed
//! for a sandbox whose directory is ours.

use super::LinuxRuntime;
use crate::{Runtime, SandboxHandle};
use std::collections::HashSet;
use std::path::Path;
use uuid::Uuid;

/// Destroys every sandbox under the data directory whose id is not in `keep`, and
/// frees the slots of the `ended` ones whose start had not made a directory yet;
/// returns the ids removed.
pub(super) fn reconcile(
    rt: &LinuxRuntime,
    keep: &HashSet<Uuid>,
    ended: &HashSet<Uuid>,
) -> Vec<Uuid> {
    for id in ended {
        if let Some(base) = rt.slots.held_by(*id) {
            rt.slots.free(base, *id);
        }
    }
    let Ok(entries) = std::fs::read_dir(rt.sandboxes_dir()) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        // Warm entries (`.warm-<key>`) are swept by the warm pool.
        let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| Uuid::parse_str(n).ok())
        else {
            continue;
        };
        if keep.contains(&id) {
            continue;
        }
        let dir = entry.path();
        // A live `sandboxd run` still holds it (mid-create, so no record claims it
        // yet): that run ends it. Held while destroyed, away from other sweepers.
        let Ok(_owner) = super::tether::lock_mark(&rt.sandboxes_dir(), id) else {
            tracing::info!(sandbox = %id, "left to the live run that owns it");
            continue;
        };
        let handle = stored_handle(&dir).unwrap_or_else(|| partial_handle(rt, id, &dir));
        match rt.destroy(&handle) {
            Ok(()) => removed.push(id),
            Err(e) => {
                tracing::error!(sandbox = %id, error = %e, "cannot remove a sandbox no record claims")
            }
        }
    }
    removed
}

/// The handle a completed start wrote.
fn stored_handle(dir: &Path) -> Option<SandboxHandle> {
    let bytes = std::fs::read(dir.join("handle.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// What a start interrupted before writing its handle left to go by: the id (which
/// names its cgroups), the dir (its mounts and disk) and the slot recorded for it.
pub(super) fn partial_handle(rt: &LinuxRuntime, id: Uuid, dir: &Path) -> SandboxHandle {
    SandboxHandle {
        id,
        agent_pid: 0,
        agent_start_ticks: 0,
        agent_socket: dir.join("agent.sock"),
        state_dir: dir.to_owned(),
        host_id_base: rt.slots.held_by(id).unwrap_or(0),
        warm: false,
        isolation: Default::default(),
    }
}
