//! Sandboxes of one-shot runs killed before they finished their teardown (their owner
//! mark is unlocked; see the runtime's `tether`), on either tier: ended through the
//! engine, so the store records them TERMINATED, and whatever the runtime still holds
//! of them (mounts, disk, cgroups, id slot, network lease, a gVisor sentry) removed.
//! The next run sweeps at its start; a server sweeps every [`SWEEP_EVERY`] while it
//! runs. Older binaries' `runs/` markers are swept too (`legacy_run_markers`), and so
//! are the warm entries of dead processes (a killed run's early init, never taken).

use sandboxd_engine::Engine;
use sandboxd_runtime::linux::LinuxRuntime;
use sandboxd_runtime::Runtime;
use sandboxd_store::{SqliteStore, Store};
use std::sync::Arc;
use std::time::Duration;

/// How often a server looks for orphaned run sandboxes.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Ends every orphaned run sandbox of the data dir, with `tiers` (the engine's
/// runtime) for what the engine did not reach; how many there were.
pub(crate) async fn sweep(
    engine: &Engine,
    store: &SqliteStore,
    linux: &Arc<LinuxRuntime>,
    tiers: &Arc<dyn Runtime>,
) -> usize {
    crate::legacy_run_markers::sweep(engine, linux, engine.data_dir()).await;
    let found = {
        let linux = linux.clone();
        tokio::task::spawn_blocking(move || {
            // Early inits of runs killed before their start took them (a run's own
            // runtime swept them when it opened; a server's opened long ago).
            linux.sweep_dead_warm_entries();
            linux.orphans()
        })
        .await
        .unwrap_or_default()
    };
    let count = found.len();
    for orphan in found {
        let id = orphan.id;
        tracing::info!(sandbox = %id, "ending a run's sandbox its killed process left");
        match store.get_sandbox(id) {
            Ok(Some(rec)) => {
                if let Err(e) = engine.destroy(&rec.workspace, id).await {
                    tracing::warn!(sandbox = %id, error = %e, "ending an orphaned run sandbox");
                    // Its mark stays for the next sweep.
                    continue;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e, "reading an orphaned run sandbox");
                continue;
            }
        }
        // What the engine did not reach (a start killed before its handle was saved),
        // then the mark.
        let (linux, tiers) = (linux.clone(), tiers.clone());
        let removed =
            tokio::task::spawn_blocking(move || linux.remove_orphan(orphan, tiers.as_ref())).await;
        if let Ok(Err(e)) = removed {
            tracing::warn!(sandbox = %id, error = %e, "removing an orphaned run sandbox");
        }
    }
    count
}

/// Sweeps every [`SWEEP_EVERY`] for as long as the engine lives.
pub(crate) fn spawn_sweeper(
    engine: &Arc<Engine>,
    store: Arc<SqliteStore>,
    linux: Arc<LinuxRuntime>,
    tiers: Arc<dyn Runtime>,
) {
    let engine = Arc::downgrade(engine);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            let Some(engine) = engine.upgrade() else {
                return;
            };
            sweep(&engine, &store, &linux, &tiers).await;
        }
    });
}
