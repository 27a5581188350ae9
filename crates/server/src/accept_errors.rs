//! The accept loop's failures, logged at a bounded rate: a server out of descriptors
//! fails every accept until connections end, and retrying every 50 ms must not write a
//! WARN line each time. The first failure is logged at once; later ones are counted and
//! summed up in one line at most every [`SUMMARY_EVERY`] (at the next failure, or at the
//! next accepted connection once the shortage is over).

use std::time::{Duration, Instant};

/// The least time between two log lines about failed accepts.
pub(crate) const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// Failed accepts since the last line logged about them.
#[derive(Default)]
pub(crate) struct AcceptErrors {
    /// When the last line was logged.
    logged: Option<Instant>,
    /// Failures since then, not logged one by one.
    unlogged: u64,
}

impl AcceptErrors {
    /// Accepting failed with `e`: logged now if no line was for [`SUMMARY_EVERY`]
    /// (with the count of those not logged since), else counted.
    pub(crate) fn failed(&mut self, e: &std::io::Error) {
        if !self.due() {
            self.unlogged += 1;
            return;
        }
        match self.unlogged {
            0 => tracing::warn!(error = %e, "cannot accept a connection; retrying shortly"),
            n => tracing::warn!(
                error = %e,
                failures = n + 1,
                since_secs = SUMMARY_EVERY.as_secs(),
                "cannot accept connections ({} failures since the last line); retrying shortly",
                n + 1
            ),
        }
        self.logged = Some(Instant::now());
        self.unlogged = 0;
    }

    /// A connection was accepted: the failures counted since the last line are summed up
    /// once that line is [`SUMMARY_EVERY`] old.
    pub(crate) fn accepted(&mut self) {
        if self.unlogged == 0 || !self.due() {
            return;
        }
        tracing::info!(
            failures = self.unlogged,
            "accepting connections again ({} failed accepts since the last line)",
            self.unlogged
        );
        self.logged = Some(Instant::now());
        self.unlogged = 0;
    }

    fn due(&self) -> bool {
        self.logged.is_none_or(|at| at.elapsed() >= SUMMARY_EVERY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_of_a_run_of_failures_is_due_until_the_summary() {
        let mut errors = AcceptErrors::default();
        let e = std::io::Error::from_raw_os_error(libc::EMFILE);
        errors.failed(&e);
        assert!(errors.logged.is_some());
        for _ in 0..1000 {
            errors.failed(&e);
            errors.accepted();
        }
        assert_eq!(errors.unlogged, 1000, "counted, not logged");
        // Once the last line is old enough, the next failure sums them up.
        errors.logged = Some(Instant::now() - SUMMARY_EVERY);
        errors.failed(&e);
        assert_eq!(errors.unlogged, 0);
        errors.failed(&e);
        errors.logged = Some(Instant::now() - SUMMARY_EVERY);
        errors.accepted();
        assert_eq!(errors.unlogged, 0, "summed up once accepting again");
    }
}
