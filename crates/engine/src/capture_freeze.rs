//! Sandboxes held frozen for captures: a filesystem snapshot freezes its sandbox before
//! it measures what it reserves, and thaws it only after the copy, so nothing the
//! sandbox writes can be stored beyond the reservation. Concurrent snapshots of one
//! sandbox share one freeze: the first freezes, the last thaws.

use crate::engine::runtime_error;
use crate::error::EngineError;
use sandboxd_runtime::{Runtime, SandboxHandle};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Captures holding each sandbox frozen.
#[derive(Debug, Default)]
pub(crate) struct CaptureFreezes {
    held: Mutex<HashMap<Uuid, u32>>,
}

/// One capture's hold of a frozen sandbox; the last one dropped thaws it.
pub(crate) struct Frozen<'a> {
    of: &'a CaptureFreezes,
    runtime: Arc<dyn Runtime>,
    handle: SandboxHandle,
}

impl CaptureFreezes {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, u32>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Freezes the RUNNING sandbox of `handle` for a capture (unless another capture
    /// holds it frozen already). Called under the sandbox's shared lock, so no pause or
    /// resume changes it meanwhile. The freeze and thaw are quick cgroup writes (a
    /// `runsc pause`/`resume` on gVisor), done under this map's lock so that a thaw
    /// never lands after the next capture's freeze.
    pub(crate) fn hold(
        &self,
        runtime: &Arc<dyn Runtime>,
        handle: &SandboxHandle,
    ) -> Result<Frozen<'_>, EngineError> {
        let mut held = self.held();
        let n = held.entry(handle.id).or_default();
        if *n == 0 {
            sandboxd_runtime::faults::hit("snapshot.freeze");
            runtime
                .freeze(handle)
                .map_err(|e| runtime_error("cannot freeze the sandbox to snapshot it", e))?;
        }
        *n += 1;
        Ok(Frozen {
            of: self,
            runtime: runtime.clone(),
            handle: handle.clone(),
        })
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let mut held = self.of.held();
        let Some(n) = held.get_mut(&self.handle.id) else {
            return;
        };
        *n = n.saturating_sub(1);
        if *n > 0 {
            return;
        }
        held.remove(&self.handle.id);
        if let Err(err) = self.runtime.thaw(&self.handle) {
            tracing::warn!(sandbox = %self.handle.id, error = %err, "cannot thaw a snapshotted sandbox");
        }
    }
}
