//! autoPause: sandboxes that consented are moved to disk (checkpointed) when memory
//! runs short, oldest-idle first, and woken by the next operation on them.
//!
//! A sandbox on disk keeps its RUNNING status (its owner did not pause it) with
//! `auto_paused_at` set; `Engine::shared` restores it before any operation proceeds,
//! so an operation waits for the restore and is never refused. Only sandboxes the
//! backend can checkpoint move (gVisor, with or without egress); others keep their consent and
//! stay in memory.

mod activity;
mod adopt;
mod pressure;
mod sweep;
mod wake;

pub(crate) use activity::{Activity, Busy};
pub(crate) use adopt::{recover_on_disk, recover_restored};
pub use pressure::host_available_mb;
pub(crate) use sweep::run;

use std::time::Duration;

/// When memory counts as short, and how often it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoPause {
    /// Host memory (MiB) the sandboxes whose memory is resident may use together,
    /// read from their cgroups; past it, consenting sandboxes go to disk. 0: no budget.
    pub memory_budget_mb: u64,
    /// The host's `MemAvailable` (MiB) below which consenting sandboxes go to disk.
    /// 0: the host's memory is not watched.
    pub min_available_mb: u64,
    /// How often memory is checked; zero: never (no background task).
    pub interval: Duration,
}

impl Default for AutoPause {
    fn default() -> Self {
        Self {
            memory_budget_mb: 0,
            min_available_mb: 256,
            interval: Duration::from_secs(5),
        }
    }
}
