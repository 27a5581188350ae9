//! Sandboxes held frozen for captures: a filesystem snapshot freezes its sandbox before
//! it measures what it reserves, and thaws it only after the copy, so nothing the
//! sandbox writes can be stored beyond the reservation. Concurrent snapshots of one
//! sandbox share one freeze: the first freezes, the last thaws.
//!
//! The freeze and thaw are blocking runtime calls (a cgroup freezer that may take up to
//! its timeout to settle, `runsc pause`/`resume` on gVisor): they run off the async
//! threads, serialized per sandbox by an async lock, never under a server-wide lock.

use crate::engine::runtime_error;
use crate::error::EngineError;
use sandboxd_runtime::{Runtime, SandboxHandle};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// How many captures hold one sandbox frozen; its lock orders freezes and thaws.
type Count = Arc<tokio::sync::Mutex<u32>>;

/// Captures holding each sandbox frozen.
#[derive(Debug, Default)]
pub(crate) struct CaptureFreezes {
    held: Arc<Mutex<HashMap<Uuid, Count>>>,
}

/// One capture's hold of a frozen sandbox. [`Frozen::release`] gives it back (the last
/// one thaws); dropped without it, the release runs on a task of its own.
pub(crate) struct Frozen {
    map: Arc<Mutex<HashMap<Uuid, Count>>>,
    count: Count,
    runtime: Arc<dyn Runtime>,
    handle: SandboxHandle,
    released: bool,
}

fn lock_map(map: &Mutex<HashMap<Uuid, Count>>) -> std::sync::MutexGuard<'_, HashMap<Uuid, Count>> {
    map.lock().unwrap_or_else(|p| p.into_inner())
}

/// Thaws `handle` off the async threads (best effort: a failure is logged).
async fn thaw(runtime: &Arc<dyn Runtime>, handle: &SandboxHandle) {
    let (rt, h) = (runtime.clone(), handle.clone());
    let thawed = tokio::task::spawn_blocking(move || rt.thaw(&h)).await;
    if let Ok(Err(err)) = thawed {
        tracing::warn!(sandbox = %handle.id, error = %err, "cannot thaw a snapshotted sandbox");
    }
}

impl CaptureFreezes {
    /// Freezes the RUNNING sandbox of `handle` for a capture (unless another capture
    /// holds it frozen already). Called under the sandbox's shared lock, so no pause or
    /// resume changes it meanwhile. A freeze that fails is undone (thawed) before the
    /// error returns: a failed snapshot never leaves a RUNNING sandbox frozen.
    pub(crate) async fn hold(
        &self,
        runtime: &Arc<dyn Runtime>,
        handle: &SandboxHandle,
    ) -> Result<Frozen, EngineError> {
        let count = lock_map(&self.held).entry(handle.id).or_default().clone();
        let mut n = count.lock().await;
        if *n == 0 {
            let (rt, h) = (runtime.clone(), handle.clone());
            let frozen = tokio::task::spawn_blocking(move || {
                rt.freeze(&h)?;
                if sandboxd_runtime::faults::hit("snapshot.freeze") {
                    return Err(sandboxd_runtime::RuntimeError::Injected("snapshot.freeze"));
                }
                Ok(())
            })
            .await;
            let failed = match frozen {
                Ok(Ok(())) => None,
                Ok(Err(err)) => Some(runtime_error(
                    "cannot freeze the sandbox to snapshot it",
                    err,
                )),
                Err(join) => Some(EngineError::with_source(
                    crate::error::ErrorCode::Internal,
                    "the freeze of a sandbox to snapshot it panicked",
                    join,
                )),
            };
            if let Some(err) = failed {
                thaw(runtime, handle).await;
                return Err(err);
            }
        }
        *n += 1;
        drop(n);
        Ok(Frozen {
            map: self.held.clone(),
            count,
            runtime: runtime.clone(),
            handle: handle.clone(),
            released: false,
        })
    }
}

impl Frozen {
    /// Gives the hold back; the last one thaws the sandbox before this returns.
    pub(crate) async fn release(mut self) {
        self.released = true;
        release(
            self.map.clone(),
            self.count.clone(),
            self.runtime.clone(),
            self.handle.clone(),
        )
        .await;
    }
}

async fn release(
    map: Arc<Mutex<HashMap<Uuid, Count>>>,
    count: Count,
    runtime: Arc<dyn Runtime>,
    handle: SandboxHandle,
) {
    let mut n = count.lock().await;
    *n = n.saturating_sub(1);
    if *n > 0 {
        return;
    }
    thaw(&runtime, &handle).await;
    drop(n);
    // The entry goes once no one else holds it (clones are taken under the map's lock).
    let mut held = lock_map(&map);
    if held
        .get(&handle.id)
        .is_some_and(|c| Arc::ptr_eq(c, &count) && Arc::strong_count(c) == 2)
    {
        held.remove(&handle.id);
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let args = (
            self.map.clone(),
            self.count.clone(),
            self.runtime.clone(),
            self.handle.clone(),
        );
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(release(args.0, args.1, args.2, args.3));
            }
            // No async runtime left (shutting down): thaw here, as the count allows.
            Err(_) => {
                let (_, count, runtime, handle) = args;
                let last = match count.try_lock() {
                    Ok(mut n) => {
                        *n = n.saturating_sub(1);
                        *n == 0
                    }
                    Err(_) => false,
                };
                if last {
                    let _ = runtime.thaw(&handle);
                }
            }
        }
    }
}
