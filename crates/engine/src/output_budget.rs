//! The server-wide budget of captured exec output held in memory: an exec that captures
//! its output reserves room for it (the agent's base64 answer, the decoded bytes and the
//! dialect's answer) before it runs, and gives it back when its answer has been sent, so
//! the server's memory for exec output stays bounded however many clients ask at once.
//! One workspace holds at most [`WORKSPACE_SHARE`] of it: long-running commands of one
//! tenant (each holding room for its whole run) cannot lock every other tenant out.

use crate::error::{EngineError, ErrorCode};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget is counted in units of this many bytes.
const UNIT: u64 = 1024;
/// How long an exec waits for room before it is refused (503, retryable).
const WAIT: Duration = Duration::from_secs(5);
/// How often an exec over its workspace's share looks again.
const SHARE_POLL: Duration = Duration::from_millis(10);
/// How soon a refused exec may retry.
const RETRY: Duration = Duration::from_secs(1);
/// Bytes held in the server per byte of output cap: the agent's answer (base64, 4/3),
/// the decoded output (1) and the dialect's answer (base64 or escaped text, ~4/3), less
/// what is freed between them; measured ~1.5 (REVIEW11 #4), charged with slack.
pub const BYTES_PER_OUTPUT_BYTE: u64 = 3;
/// The part of the budget one workspace may hold at once (1/4), never less than one
/// exec's room: past it, that workspace's execs are refused (429), no one else's.
pub const WORKSPACE_SHARE: u64 = 4;

/// Units each workspace holds now.
type Holders = Arc<Mutex<HashMap<String, u64>>>;

/// Room for captured exec output, server-wide.
#[derive(Debug)]
pub(crate) struct OutputBudget {
    /// `None`: no budget (0 configured).
    units: Option<Arc<Semaphore>>,
    total_units: u64,
    holders: Holders,
}

/// One reservation: its permit, and its workspace's count given back on drop.
#[derive(Debug)]
struct Held {
    _permit: OwnedSemaphorePermit,
    holders: Holders,
    ws: String,
    units: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = holders.get_mut(&self.ws) {
            *n = n.saturating_sub(self.units);
            if *n == 0 {
                holders.remove(&self.ws);
            }
        }
    }
}

/// Room an exec holds until its answer is dropped (sent, or its client went away).
/// Clones share the one reservation; it is freed when the last one goes.
#[derive(Debug, Clone, Default)]
pub struct OutputHold(#[allow(dead_code)] Option<Arc<Held>>);

impl PartialEq for OutputHold {
    /// A reservation is no part of a result's value.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for OutputHold {}

impl OutputBudget {
    /// A budget of `bytes` (0: unlimited).
    pub(crate) fn new(bytes: u64) -> Self {
        let total_units = bytes.div_ceil(UNIT).min(Semaphore::MAX_PERMITS as u64);
        Self {
            units: (total_units > 0).then(|| Arc::new(Semaphore::new(total_units as usize))),
            total_units,
            holders: Default::default(),
        }
    }

    /// Reserves room for an exec of workspace `ws` whose output may reach
    /// `max_output_bytes`, waiting a little for it; `CapacityExhausted` (503 with
    /// `Retry-After`) when none frees up, `RateLimited` (429) when `ws` already holds
    /// its share. An exec larger than the whole budget reserves all of it (it runs
    /// alone).
    pub(crate) async fn reserve(
        &self,
        ws: &str,
        max_output_bytes: u64,
    ) -> Result<OutputHold, EngineError> {
        self.reserve_within(ws, max_output_bytes, WAIT).await
    }

    /// Counts `want` units for `ws` if that keeps it within `share`.
    fn count_in(&self, ws: &str, want: u64, share: u64) -> bool {
        let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
        let n = holders.entry(ws.to_owned()).or_default();
        if *n + want > share {
            if *n == 0 {
                holders.remove(ws);
            }
            return false;
        }
        *n += want;
        true
    }

    async fn reserve_within(
        &self,
        ws: &str,
        max_output_bytes: u64,
        wait: Duration,
    ) -> Result<OutputHold, EngineError> {
        let Some(units) = &self.units else {
            return Ok(OutputHold(None));
        };
        let want = max_output_bytes
            .saturating_mul(BYTES_PER_OUTPUT_BYTE)
            .div_ceil(UNIT)
            .clamp(1, self.total_units.min(u32::MAX as u64));
        let share = (self.total_units / WORKSPACE_SHARE).max(want);
        let deadline = tokio::time::Instant::now() + wait;
        // Counted before the wait for room, so that one workspace's waiters cannot
        // queue past its share either; over it, waits a little for its own to end.
        while !self.count_in(ws, want, share) {
            if tokio::time::Instant::now() >= deadline {
                return Err(EngineError::new(
                    ErrorCode::RateLimited,
                    "this workspace is holding as much command output as one workspace may; \
                     retry once its running commands end",
                )
                .retry_after(RETRY));
            }
            tokio::time::sleep(SHARE_POLL).await;
        }
        let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
        let acquired =
            tokio::time::timeout(wait, units.clone().acquire_many_owned(want as u32)).await;
        let held_units = Held {
            _permit: match acquired {
                Ok(Ok(permit)) => permit,
                _ => {
                    give_back(&self.holders, ws, want);
                    return Err(EngineError::new(
                        ErrorCode::CapacityExhausted,
                        "the server is holding as much command output as it allows; retry shortly",
                    )
                    .retry_after(RETRY));
                }
            },
            holders: self.holders.clone(),
            ws: ws.to_owned(),
            units: want,
        };
        Ok(OutputHold(Some(Arc::new(held_units))))
    }
}

/// Takes `units` off `ws`'s count (a reservation that never got its room).
fn give_back(holders: &Holders, ws: &str, units: u64) {
    let mut holders = holders.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = holders.get_mut(ws) {
        *n = n.saturating_sub(units);
        if *n == 0 {
            holders.remove(ws);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn room_is_bounded_and_given_back() {
        let budget = OutputBudget::new(3 * 1024 * 1024);
        let first = budget.reserve("w", 1024 * 1024).await.unwrap();
        let copy = first.clone();
        let err = budget
            .reserve_within("x", 1, Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::CapacityExhausted);
        assert_eq!(err.retry_after_secs(), Some(1));
        drop(first);
        assert!(
            budget.reserve_within("x", 1, Duration::ZERO).await.is_err(),
            "a clone still holds it"
        );
        drop(copy);
        budget.reserve("w", 1024 * 1024).await.unwrap();
    }

    #[tokio::test]
    async fn one_workspace_holds_at_most_its_share_and_others_still_get_room() {
        // 16 MiB: a share of 4 MiB, 1 MiB (3 MiB of room with its slack) per exec.
        let budget = OutputBudget::new(16 << 20);
        let first = budget.reserve("greedy", 1 << 20).await.unwrap();
        let err = budget
            .reserve_within("greedy", 1 << 20, Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(
            err.code,
            ErrorCode::RateLimited,
            "past its share: its own 429"
        );
        assert!(err.retry_after_secs().is_some());
        let other = budget
            .reserve_within("other", 1 << 20, Duration::ZERO)
            .await;
        assert!(other.is_ok(), "another workspace is served");
        drop(first);
        budget
            .reserve_within("greedy", 1 << 20, Duration::ZERO)
            .await
            .expect("its room comes back with the hold");
        assert_eq!(
            budget.holders.lock().unwrap().get("greedy"),
            None,
            "no count left after drops"
        );
    }

    #[tokio::test]
    async fn larger_than_the_budget_runs_alone_and_zero_is_unlimited() {
        let budget = OutputBudget::new(1024 * 1024);
        drop(budget.reserve("w", u64::MAX).await.unwrap());
        let none = OutputBudget::new(0);
        let held: Vec<_> =
            futures_util::future::join_all((0..50).map(|_| none.reserve("w", u64::MAX))).await;
        assert!(held.iter().all(Result::is_ok));
    }
}
