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
        // A retention reaching before 1970 keeps everything (the server's config
        // refuses such values; this never panics nor compares a date out of range).
        let Some(before) = before_now(retention) else {
            return Ok(0);
        };
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

/// The instant `retention` before now, or `None` when that is before 1970 (nothing the
/// server recorded is that old, and the store keeps no dates before it) or before the
/// earliest date the server can compute.
pub(crate) fn before_now(retention: Duration) -> Option<OffsetDateTime> {
    let retention = time::Duration::try_from(retention).ok()?;
    OffsetDateTime::now_utc()
        .checked_sub(retention)
        .filter(|before| *before >= OffsetDateTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_past_the_calendar_is_no_date_and_no_panic() {
        assert!(before_now(Duration::from_secs(3600)).is_some());
        assert!(before_now(Duration::from_secs(10 * 365 * 24 * 3600)).is_some());
        // The config's most, 100 years, reaches before 1970: nothing is that old.
        assert_eq!(before_now(Duration::from_secs(100 * 366 * 24 * 3600)), None);
        let hours = |h: u64| Duration::from_secs(h * 3600);
        assert_eq!(before_now(hours(100_000_000)), None);
        assert_eq!(before_now(hours(u64::from(u32::MAX))), None);
        assert_eq!(before_now(Duration::MAX), None);
    }
}
