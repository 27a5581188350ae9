//! Live resource usage of one sandbox: its cgroup's CPU time, memory and tasks, its
//! writable layer's used bytes and its interfaces' byte counts, with its limits, and
//! its CPU use in percent (100 = one CPU) over the interval since the previous reading
//! of it (a first reading measures over [`FIRST_INTERVAL`]).

use crate::engine::{runtime_error, Engine};
use crate::error::EngineError;
use crate::lifecycle::wrong_state;
use crate::model::WorkspaceId;
use crate::state::SandboxStatus;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use time::OffsetDateTime;
use uuid::Uuid;

/// The interval a first reading of a sandbox measures its CPU percentage over.
pub const FIRST_INTERVAL: Duration = Duration::from_millis(500);

/// A previous reading older than this is not used as the interval's start.
const STALE: Duration = Duration::from_secs(60);

/// The shortest interval a percentage is measured over.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// One sandbox's usage now.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxUsage {
    pub sandbox_id: Uuid,
    pub status: SandboxStatus,
    pub at: OffsetDateTime,
    /// CPU time used since the sandbox started.
    pub cpu_seconds: f64,
    /// CPU use over the last interval, in percent of one CPU (at most `vcpu` × 100).
    pub cpu_percent: f64,
    /// How long that interval was.
    pub interval_ms: u64,
    pub vcpu: u32,
    pub memory_bytes: u64,
    pub memory_peak_bytes: u64,
    pub memory_limit_bytes: u64,
    pub pids: u64,
    pub pids_limit: u64,
    pub disk_used_bytes: u64,
    /// `None`: the writable layer has no size limit.
    pub disk_limit_bytes: Option<u64>,
    pub net_rx_bytes: u64,
    pub net_tx_bytes: u64,
}

/// One CPU reading: when, and the CPU time used by then.
type Reading = (Instant, u64);

/// The last CPU reading of each sandbox read lately, and the one before it that is at
/// least [`MIN_INTERVAL`] older (the start of an interval ending soon after the last).
#[derive(Default)]
pub(crate) struct CpuReadings(Mutex<HashMap<Uuid, (Option<Reading>, Reading)>>);

impl CpuReadings {
    /// The reading an interval ending now starts at: the last one if it is at least
    /// [`MIN_INTERVAL`] old, else the one before it; `None` when there is neither (or
    /// they are stale), and how long to wait first when only a too recent one exists.
    fn start_of(&self, id: Uuid) -> (Option<Reading>, Duration) {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Some((before, last)) = map.get(&id).copied() else {
            return (None, Duration::ZERO);
        };
        if last.0.elapsed() >= STALE {
            return (None, Duration::ZERO);
        }
        match (last.0.elapsed() >= MIN_INTERVAL, before) {
            (true, _) => (Some(last), Duration::ZERO),
            (false, Some(b)) if b.0.elapsed() < STALE => (Some(b), Duration::ZERO),
            (false, _) => (Some(last), MIN_INTERVAL.saturating_sub(last.0.elapsed())),
        }
    }

    fn record(&self, id: Uuid, at: Instant, cpu_ns: u64) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, (_, last)| last.0.elapsed() < STALE);
        let next = match map.get(&id) {
            // A reading soon after the last keeps the older start for the next one.
            Some((before, last)) if at.duration_since(last.0) < MIN_INTERVAL => {
                (*before, (at, cpu_ns))
            }
            Some((_, last)) => (Some(*last), (at, cpu_ns)),
            None => (None, (at, cpu_ns)),
        };
        map.insert(id, next);
    }
}

impl Engine {
    /// The usage of a RUNNING or PAUSED sandbox of `ws`.
    pub async fn usage(&self, ws: &WorkspaceId, id: Uuid) -> Result<SandboxUsage, EngineError> {
        let (guard, e) = self.shared(ws, id).await?;
        let handle = match (&e.handle, e.sb.status) {
            (Some(h), SandboxStatus::Running | SandboxStatus::Paused) => h.clone(),
            _ => return Err(wrong_state(&e.sb, "RUNNING or PAUSED")),
        };
        let read = |h: sandboxd_runtime::SandboxHandle| async move {
            let now = Instant::now();
            self.blocking(move |rt| rt.usage(&h))
                .await?
                .map(|u| (now, u))
                .map_err(|err| runtime_error(&format!("reading the usage of sandbox {id}"), err))
        };
        let (known, wait) = self.cpu_readings.start_of(id);
        tokio::time::sleep(wait).await;
        let start = match known {
            Some(start) => start,
            None => {
                let (at, first) = read(handle.clone()).await?;
                tokio::time::sleep(FIRST_INTERVAL).await;
                (at, first.cpu_usage_ns)
            }
        };
        let (now, u) = read(handle).await?;
        drop(guard);
        self.cpu_readings.record(id, now, u.cpu_usage_ns);
        let interval = now.duration_since(start.0);
        let used = u.cpu_usage_ns.saturating_sub(start.1) as f64;
        let cpu_percent = match interval.as_nanos() {
            0 => 0.0,
            n => used / n as f64 * 100.0,
        };
        let disk_mb = e.sb.disk_mb.unwrap_or(self.limits.disk_mb_per_sandbox);
        Ok(SandboxUsage {
            sandbox_id: id,
            status: e.sb.status,
            at: OffsetDateTime::now_utc(),
            cpu_seconds: u.cpu_usage_ns as f64 / 1e9,
            cpu_percent,
            interval_ms: interval.as_millis() as u64,
            vcpu: e.sb.resources.vcpu,
            memory_bytes: u.memory_bytes,
            memory_peak_bytes: u.memory_peak_bytes.max(u.memory_bytes),
            memory_limit_bytes: u64::from(e.sb.resources.memory_mb) * 1024 * 1024,
            pids: u.pids,
            pids_limit: self.limits.pids_per_sandbox.into(),
            disk_used_bytes: u.disk_used_bytes,
            disk_limit_bytes: (disk_mb > 0).then(|| u64::from(disk_mb) * 1024 * 1024),
            net_rx_bytes: u.net_rx_bytes,
            net_tx_bytes: u.net_tx_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_never_shorter_than_the_minimum() {
        let r = CpuReadings::default();
        let id = Uuid::new_v4();
        assert_eq!(r.start_of(id), (None, Duration::ZERO));
        let t0 = Instant::now() - Duration::from_secs(2);
        r.record(id, t0, 1_000);
        // The last reading is old enough: it starts the interval.
        assert_eq!(r.start_of(id), (Some((t0, 1_000)), Duration::ZERO));
        let t1 = Instant::now();
        r.record(id, t1, 5_000);
        // Right after a reading, the one before it starts the interval.
        assert_eq!(r.start_of(id), (Some((t0, 1_000)), Duration::ZERO));
        // Readings in quick succession keep that start.
        r.record(id, t1 + Duration::from_millis(1), 5_100);
        assert_eq!(r.start_of(id).0, Some((t0, 1_000)));
        // With only a fresh reading, the caller waits out the minimum.
        let other = Uuid::new_v4();
        r.record(other, Instant::now(), 0);
        let (start, wait) = r.start_of(other);
        assert!(start.is_some() && wait > Duration::ZERO && wait <= MIN_INTERVAL);
    }
}
