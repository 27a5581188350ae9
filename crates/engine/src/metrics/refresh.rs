//! The gauges read when the metrics are: sandboxes by state from the store, the warm
//! pool from the backend, the data directory's disk use (measured at most every
//! [`DISK_MEASURE_EVERY`]), and the server process's CPU time and memory.

use super::{DiskLabels, Metrics, StateLabels, TierLabels, AGENT_CONNECTION_ERRORS};
use crate::engine::Engine;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long one measure of the data directory's disk use is reused.
const DISK_MEASURE_EVERY: Duration = Duration::from_secs(15);

/// Every state label, in the store's names lowercased.
const STATES: [&str; 7] = [
    "pending",
    "starting",
    "running",
    "pausing",
    "paused",
    "resuming",
    "terminating",
];

/// Every isolation tier label.
pub(super) const TIERS: [&str; 2] = ["container", "gvisor"];

/// Totals of counters kept elsewhere, as far as they were added here.
#[derive(Default)]
pub(super) struct Seen {
    /// Warm pool hits and misses by tier (as [`TIERS`]).
    warm_hits: [u64; 2],
    warm_misses: [u64; 2],
    agent_errors: u64,
    cpu_seconds: f64,
}

#[derive(Clone, Copy)]
pub(super) struct DiskMeasure {
    at: Instant,
    data_dir: u64,
    layers: u64,
}

impl Engine {
    /// The metrics the engine owns.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Refreshes the gauges, then encodes every metric in `format`; returns the text
    /// and its content type.
    pub async fn render_metrics(&self, format: super::Format) -> (String, &'static str) {
        let me = self.me.upgrade();
        if let Some(engine) = me {
            let _ = tokio::task::spawn_blocking(move || engine.refresh_metrics()).await;
        }
        self.metrics.encode(format)
    }

    fn refresh_metrics(&self) {
        let m = &self.metrics;
        // Rows from before tiers were recorded run on the server's default.
        let default_tier = self.limits.isolation.as_str();
        let t0 = Instant::now();
        let active = self
            .store
            .sandboxes_in_status(&crate::state::ACTIVE_STATUSES);
        m.store("sandboxes_in_status", t0.elapsed());
        if let Ok(active) = active {
            for state in STATES {
                for t in TIERS {
                    let n = active
                        .iter()
                        .filter(|r| r.isolation.as_deref().unwrap_or(default_tier) == t)
                        .filter(|r| r.status.eq_ignore_ascii_case(state))
                        .count();
                    m.sandboxes
                        .get_or_create(&StateLabels { state, tier: t })
                        .set(n as i64);
                }
            }
        }
        let mut seen = m.seen.lock().unwrap_or_else(|p| p.into_inner());
        for (isolation, pool) in self.runtime.warm_pools() {
            let tier = isolation.as_str();
            let Some(i) = TIERS.iter().position(|t| *t == tier) else {
                continue;
            };
            let labels = TierLabels { tier: TIERS[i] };
            m.warm_ready.get_or_create(&labels).set(pool.ready as i64);
            m.warm_target.get_or_create(&labels).set(pool.target as i64);
            m.warm_hits
                .get_or_create(&labels)
                .inc_by(pool.hits.saturating_sub(seen.warm_hits[i]));
            m.warm_misses
                .get_or_create(&labels)
                .inc_by(pool.misses.saturating_sub(seen.warm_misses[i]));
            seen.warm_hits[i] = seen.warm_hits[i].max(pool.hits);
            seen.warm_misses[i] = seen.warm_misses[i].max(pool.misses);
        }
        let errors = AGENT_CONNECTION_ERRORS.load(Ordering::Relaxed);
        m.agent_errors
            .inc_by(errors.saturating_sub(seen.agent_errors));
        seen.agent_errors = seen.agent_errors.max(errors);
        if let Some(p) = super::process::measure() {
            if p.cpu_seconds > seen.cpu_seconds {
                m.cpu_seconds.inc_by(p.cpu_seconds - seen.cpu_seconds);
                seen.cpu_seconds = p.cpu_seconds;
            }
            m.resident_bytes.set(p.resident_bytes as i64);
        }
        drop(seen);
        let disk = self.disk_measure();
        m.disk_bytes
            .get_or_create(&DiskLabels { area: "data_dir" })
            .set(disk.data_dir as i64);
        m.disk_bytes
            .get_or_create(&DiskLabels { area: "layers" })
            .set(disk.layers as i64);
    }

    /// The data directory's disk use, measured again when the last one is old.
    fn disk_measure(&self) -> DiskMeasure {
        let mut cache = self
            .metrics
            .disk_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match *cache {
            Some(d) if d.at.elapsed() < DISK_MEASURE_EVERY => d,
            _ => {
                let d = DiskMeasure {
                    at: Instant::now(),
                    data_dir: allocated_bytes(&self.data_dir),
                    layers: allocated_bytes(&self.data_dir.join("layers")),
                };
                *cache = Some(d);
                d
            }
        }
    }
}

/// Bytes allocated to the files under `dir`, not crossing into other filesystems
/// (sandboxes' root mounts and loop-mounted layers are counted by their image files).
fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    walkdir::WalkDir::new(dir)
        .same_file_system(true)
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.blocks().saturating_mul(512))
        .sum()
}
