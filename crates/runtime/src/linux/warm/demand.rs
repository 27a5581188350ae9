//! How many entries the pool keeps: a base size; once a burst (starts less than
//! [`BURST_GAP`] apart) has taken the last entry of the shape the pool makes, or a
//! start of it found none, half as many again as that burst has had
//! starts so far ([`ahead`]: the next burst like it, a little larger, starts warm), up
//! to a maximum; back to the base once no burst has grown it for [`SHRINK_AFTER`]
//! (checked at the next start: an idle pool keeps what it grew to). A pool may also
//! start grown ([`Demand::grow_to`]: a server ready for a first burst), which counts
//! as grown at that moment.

use std::time::{Duration, Instant};

/// Quiet time after the last miss before the pool returns to its base size.
pub(super) const SHRINK_AFTER: Duration = Duration::from_secs(10 * 60);
/// Starts closer together than this belong to one burst.
pub(super) const BURST_GAP: Duration = Duration::from_secs(1);

/// The pool's current size and what moves it.
#[derive(Debug)]
pub(super) struct Demand {
    base: usize,
    max: usize,
    target: usize,
    last_grown: Option<Instant>,
    /// Starts in the current burst, and when the last one came.
    burst: usize,
    last_start: Option<Instant>,
}

impl Demand {
    /// Starts at `base`; grows up to `max` (at least `base`).
    pub fn new(base: usize, max: usize) -> Self {
        Demand {
            base,
            max: max.max(base),
            target: base,
            last_grown: None,
            burst: 0,
            last_start: None,
        }
    }

    /// Grows the pool to `n` entries (up to the max) at `now`, as a burst of that size
    /// would: ahead of any burst, it shrinks back like a grown one.
    pub fn grow_to(&mut self, n: usize, now: Instant) {
        if n > self.target {
            self.target = n.min(self.max);
            self.last_grown = Some(now);
        }
    }

    /// Entries of the wanted shape to keep now.
    pub fn target(&self) -> usize {
        self.target
    }

    /// A start (any shape) at `now`, before it looks for an entry.
    pub fn started(&mut self, now: Instant) {
        let apart = self
            .last_start
            .map_or(BURST_GAP, |t| now.saturating_duration_since(t));
        self.burst = if apart < BURST_GAP { self.burst + 1 } else { 1 };
        self.last_start = Some(now);
    }

    /// How long no start has come, at `now` (forever if none ever did).
    pub fn quiet_for(&self, now: Instant) -> Duration {
        self.last_start
            .map_or(Duration::MAX, |t| now.saturating_duration_since(t))
    }

    /// The start at `now` found no entry of the wanted shape: the pool grows ahead of
    /// the burst it is in.
    pub fn missed(&mut self, now: Instant) {
        self.grow(now);
    }

    /// The start at `now` took an entry, leaving `left` of its shape: a pool grown long
    /// ago shrinks back; a burst that took the last entry grows it before any start
    /// misses (spaced starts, which the refill keeps up with, leave some).
    pub fn took(&mut self, now: Instant, left: usize) {
        if self
            .last_grown
            .is_some_and(|t| now.saturating_duration_since(t) >= SHRINK_AFTER)
        {
            self.target = self.base;
            self.last_grown = None;
        }
        if left == 0 && self.burst >= 2 {
            self.grow(now);
        }
    }

    fn grow(&mut self, now: Instant) {
        self.target = self.target.max(ahead(self.burst).min(self.max));
        self.last_grown = Some(now);
    }
}

/// The size a pool grows to for a burst of `n` starts so far: half as many again.
fn ahead(n: usize) -> usize {
    n + n.div_ceil(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` starts `gap` apart from `t`, each missing; returns the time of the last.
    fn burst(d: &mut Demand, t: Instant, n: u32, gap: Duration) -> Instant {
        for i in 0..n {
            d.started(t + gap * i);
            d.missed(t + gap * i);
        }
        t + gap * (n - 1)
    }

    #[test]
    fn grows_to_the_burst_that_outran_it_up_to_the_max() {
        let t0 = Instant::now();
        let mut d = Demand::new(2, 16);
        assert_eq!(d.target(), 2);
        d.started(t0);
        d.took(t0, 1);
        assert_eq!(d.target(), 2, "a hit alone changes nothing");
        let ms = Duration::from_millis(5);
        let t = burst(&mut d, t0 + BURST_GAP, 7, ms);
        assert_eq!(d.target(), 11, "half again the burst's length");
        // Spaced-out misses are bursts of one: no growth past what it has.
        let t = burst(&mut d, t + BURST_GAP, 3, BURST_GAP);
        assert_eq!(d.target(), 11);
        burst(&mut d, t + BURST_GAP, 40, ms);
        assert_eq!(d.target(), 16, "capped at the max");
    }

    #[test]
    fn a_burst_that_empties_the_pool_grows_it_before_any_miss() {
        let t0 = Instant::now();
        let mut d = Demand::new(4, 32);
        let ms = Duration::from_millis(2);
        for i in 0..3 {
            d.started(t0 + ms * i);
            d.took(t0 + ms * i, 3 - i as usize);
        }
        assert_eq!(d.target(), 4, "three of four taken: no growth yet");
        d.started(t0 + ms * 3);
        d.took(t0 + ms * 3, 0);
        assert_eq!(d.target(), 6, "the fourth took the last: grown ahead");
        // Starts close together that the refill keeps up with never grow it, nor does
        // a lone start that takes the last entry.
        let mut d = Demand::new(2, 32);
        for i in 0..10 {
            d.started(t0 + ms * 100 * i);
            d.took(t0 + ms * 100 * i, 1);
        }
        d.started(t0 + BURST_GAP * 10);
        d.took(t0 + BURST_GAP * 10, 0);
        assert_eq!(d.target(), 2);
    }

    #[test]
    fn shrinks_back_after_quiet_counted_from_the_last_grown() {
        let t0 = Instant::now();
        let mut d = Demand::new(2, 16);
        let last = burst(&mut d, t0, 5, Duration::from_millis(5));
        assert_eq!(d.target(), 8);
        d.started(last + SHRINK_AFTER / 2);
        d.took(last + SHRINK_AFTER / 2, 1);
        assert_eq!(d.target(), 8, "a recent miss keeps it grown");
        d.started(last + SHRINK_AFTER);
        d.took(last + SHRINK_AFTER, 1);
        assert_eq!(d.target(), 2, "back to the base");
    }

    #[test]
    fn a_pool_grown_ahead_keeps_its_size_then_shrinks_like_a_grown_one() {
        let t0 = Instant::now();
        let mut d = Demand::new(2, 16);
        d.grow_to(1, t0);
        assert_eq!(d.target(), 2, "never below the base");
        d.grow_to(40, t0);
        assert_eq!(d.target(), 16, "capped at the max");
        let mut d = Demand::new(2, 32);
        d.grow_to(20, t0);
        let ms = Duration::from_millis(2);
        for i in 0..20 {
            d.started(t0 + BURST_GAP + ms * i);
            d.took(t0 + BURST_GAP + ms * i, 19 - i as usize);
        }
        assert_eq!(d.target(), 30, "a burst taking the last grows it further");
        let mut d = Demand::new(2, 32);
        d.grow_to(20, t0);
        d.started(t0 + SHRINK_AFTER / 2);
        d.took(t0 + SHRINK_AFTER / 2, 19);
        assert_eq!(d.target(), 20, "kept while recent");
        d.started(t0 + SHRINK_AFTER);
        d.took(t0 + SHRINK_AFTER, 19);
        assert_eq!(d.target(), 2, "back to the base after quiet");
    }

    #[test]
    fn a_max_below_the_base_means_no_growth() {
        let mut d = Demand::new(3, 1);
        burst(&mut d, Instant::now(), 10, Duration::from_millis(1));
        assert_eq!(d.target(), 3);
    }
}
