//! Retention of ended sandboxes' records: a sandbox's record (its metadata and
//! environment included) outlives its end only for the server's retention, after which
//! it is removed with its aliases, so that creating and deleting sandboxes cannot grow
//! the database without bound. Nothing else needs the record: a snapshot keeps its
//! source's id as plain text, audit entries name it by id, and idempotency records
//! replay their stored answers.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::lifecycle::TEARDOWN_FAILED;
use std::time::Duration;
use time::OffsetDateTime;

/// Records removed per store transaction (a round holds the writer this long at most).
const BATCH: u32 = 500;

impl Engine {
    /// Removes the records of sandboxes that ended more than `retention` ago
    /// (TERMINATED, or FAILED with nothing left to tear down); returns how many.
    pub fn prune_ended_sandboxes(&self, retention: Duration) -> Result<u64, EngineError> {
        let before = OffsetDateTime::now_utc() - retention;
        let mut pruned = 0;
        loop {
            let n = self
                .store
                .prune_ended_sandboxes(before, TEARDOWN_FAILED, BATCH)?;
            pruned += n;
            if n < u64::from(BATCH) {
                return Ok(pruned);
            }
        }
    }
}
