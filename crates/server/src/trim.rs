//! Gives memory back to the host after a crowd of connections has gone: glibc keeps
//! freed heap in its arenas, so without a trim a burst of connections (thousands of
//! slow clients) would leave the server's RSS at its peak for good.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Connections that must have ended since the last trim before another is worth it.
const WORTH_TRIMMING: usize = 256;
/// How often the count is looked at.
const PERIOD: Duration = Duration::from_secs(2);

/// Counts open connections and their peak since the last trim.
#[derive(Default)]
pub struct ConnectionCount {
    open: AtomicUsize,
    peak: AtomicUsize,
}

impl ConnectionCount {
    pub fn opened(&self) {
        let now = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    pub fn closed(&self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }

    /// Trims the heap whenever many connections have ended since the last peak; runs
    /// until the count is dropped by everyone else.
    pub async fn trim_after_crowds(self: Arc<Self>) {
        let mut tick = tokio::time::interval(PERIOD);
        while Arc::strong_count(&self) > 1 {
            tick.tick().await;
            let open = self.open.load(Ordering::Relaxed);
            if self.peak.load(Ordering::Relaxed) >= open + WORTH_TRIMMING {
                self.peak.store(open, Ordering::Relaxed);
                // SAFETY: malloc_trim only returns free heap pages to the kernel; it
                // takes the allocator's own locks and touches no live allocation.
                unsafe { libc::malloc_trim(0) };
                tracing::debug!(open, "returned freed heap to the host");
            }
        }
    }
}
