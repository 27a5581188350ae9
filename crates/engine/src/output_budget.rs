//! The server-wide budget of captured exec output held in memory: an exec that captures
//! its output reserves room for it (the agent's base64 answer, the decoded bytes and the
//! dialect's answer) before it runs, and gives it back when its answer has been sent, so
//! the server's memory for exec output stays bounded however many clients ask at once.

use crate::error::{EngineError, ErrorCode};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget is counted in units of this many bytes.
const UNIT: u64 = 1024;
/// How long an exec waits for room before it is refused (503, retryable).
const WAIT: Duration = Duration::from_secs(5);
/// How soon a refused exec may retry.
const RETRY: Duration = Duration::from_secs(1);
/// Bytes held in the server per byte of output cap: the agent's answer (base64, 4/3),
/// the decoded output (1) and the dialect's answer (base64 or escaped text, ~4/3), less
/// what is freed between them; measured ~1.5 (REVIEW11 #4), charged with slack.
pub const BYTES_PER_OUTPUT_BYTE: u64 = 3;

/// Room for captured exec output, server-wide.
#[derive(Debug)]
pub(crate) struct OutputBudget {
    /// `None`: no budget (0 configured).
    units: Option<Arc<Semaphore>>,
    total_units: u64,
}

/// Room an exec holds until its answer is dropped (sent, or its client went away).
/// Clones share the one reservation; it is freed when the last one goes.
#[derive(Debug, Clone, Default)]
pub struct OutputHold(#[allow(dead_code)] Option<Arc<OwnedSemaphorePermit>>);

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
        }
    }

    /// Reserves room for an exec whose output may reach `max_output_bytes`, waiting a
    /// little for it; `CapacityExhausted` (503 with `Retry-After`) when none frees up.
    /// An exec larger than the whole budget reserves all of it (it runs alone).
    pub(crate) async fn reserve(&self, max_output_bytes: u64) -> Result<OutputHold, EngineError> {
        self.reserve_within(max_output_bytes, WAIT).await
    }

    async fn reserve_within(
        &self,
        max_output_bytes: u64,
        wait: Duration,
    ) -> Result<OutputHold, EngineError> {
        let Some(units) = &self.units else {
            return Ok(OutputHold(None));
        };
        let want = max_output_bytes
            .saturating_mul(BYTES_PER_OUTPUT_BYTE)
            .div_ceil(UNIT)
            .clamp(1, self.total_units.min(u32::MAX as u64)) as u32;
        match tokio::time::timeout(wait, units.clone().acquire_many_owned(want)).await {
            Ok(Ok(permit)) => Ok(OutputHold(Some(Arc::new(permit)))),
            _ => Err(EngineError::new(
                ErrorCode::CapacityExhausted,
                "the server is holding as much command output as it allows; retry shortly",
            )
            .retry_after(RETRY)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn room_is_bounded_and_given_back() {
        let budget = OutputBudget::new(3 * 1024 * 1024);
        let first = budget.reserve(1024 * 1024).await.unwrap();
        let copy = first.clone();
        let err = budget.reserve_within(1, Duration::ZERO).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::CapacityExhausted);
        assert_eq!(err.retry_after_secs(), Some(1));
        drop(first);
        assert!(
            budget.reserve_within(1, Duration::ZERO).await.is_err(),
            "a clone still holds it"
        );
        drop(copy);
        budget.reserve(1024 * 1024).await.unwrap();
    }

    #[tokio::test]
    async fn larger_than_the_budget_runs_alone_and_zero_is_unlimited() {
        let budget = OutputBudget::new(1024 * 1024);
        drop(budget.reserve(u64::MAX).await.unwrap());
        let none = OutputBudget::new(0);
        let held: Vec<_> =
            futures_util::future::join_all((0..50).map(|_| none.reserve(u64::MAX))).await;
        assert!(held.iter().all(Result::is_ok));
    }
}
