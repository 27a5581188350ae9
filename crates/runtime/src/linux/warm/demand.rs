//! How many entries the pool keeps: a base size, grown by one for each start that found
//! no entry of the shape it makes (a burst faster than the refill), up to a maximum, and
//! back to the base once no start has missed for [`SHRINK_AFTER`] (checked at the next
//! start: an idle pool keeps what it grew to).

use std::time::{Duration, Instant};

/// Quiet time after the last miss before the pool returns to its base size.
pub(super) const SHRINK_AFTER: Duration = Duration::from_secs(10 * 60);

/// The pool's current size and what moves it.
#[derive(Debug)]
pub(super) struct Demand {
    base: usize,
    max: usize,
    target: usize,
    last_miss: Option<Instant>,
}

impl Demand {
    /// Starts at `base`; grows up to `max` (at least `base`).
    pub fn new(base: usize, max: usize) -> Self {
        Demand {
            base,
            max: max.max(base),
            target: base,
            last_miss: None,
        }
    }

    /// Entries of the wanted shape to keep now.
    pub fn target(&self) -> usize {
        self.target
    }

    /// A start found no entry of the wanted shape at `now`.
    pub fn missed(&mut self, now: Instant) {
        self.target = (self.target + 1).min(self.max);
        self.last_miss = Some(now);
    }

    /// A start took an entry at `now`: a pool grown by misses long ago shrinks back.
    pub fn took(&mut self, now: Instant) {
        if self
            .last_miss
            .is_some_and(|t| now.saturating_duration_since(t) >= SHRINK_AFTER)
        {
            self.target = self.base;
            self.last_miss = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_by_misses_up_to_the_max_and_shrinks_after_quiet() {
        let t0 = Instant::now();
        let mut d = Demand::new(2, 5);
        assert_eq!(d.target(), 2);
        d.took(t0);
        assert_eq!(d.target(), 2, "a hit alone changes nothing");
        for _ in 0..10 {
            d.missed(t0);
        }
        assert_eq!(d.target(), 5, "capped at the max");
        d.took(t0 + SHRINK_AFTER / 2);
        assert_eq!(d.target(), 5, "a recent miss keeps it grown");
        d.missed(t0 + SHRINK_AFTER / 2);
        d.took(t0 + SHRINK_AFTER);
        assert_eq!(d.target(), 5, "quiet counts from the last miss");
        d.took(t0 + SHRINK_AFTER / 2 + SHRINK_AFTER);
        assert_eq!(d.target(), 2, "back to the base");
    }

    #[test]
    fn a_max_below_the_base_means_no_growth() {
        let mut d = Demand::new(3, 1);
        d.missed(Instant::now());
        assert_eq!(d.target(), 3);
    }
}
