//! The server's async runtime, with its blocking threads started ahead of the first
//! burst of requests and kept while bursts may come back.
//!
//! Each create or exec runs its runtime and store calls on tokio's blocking pool, which
//! starts a thread when none is idle and ends one idle for its keep-alive (10 s by
//! default). A first burst of 20 creates therefore started ~17 threads on its way
//! (measured here: 8 threads idle, 25 at the burst's peak), and a burst after ten quiet
//! seconds did again.

use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Blocking threads started with the server: about one per request of a burst of 20.
pub const AHEAD: usize = 24;

/// How long an idle blocking thread is kept (an idle one holds a stack's few touched
/// pages).
const KEEP_ALIVE: Duration = Duration::from_secs(10 * 60);

/// The runtime `sandboxd serve` runs on, with [`AHEAD`] blocking threads started.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(KEEP_ALIVE)
        .build()?;
    start_blocking_threads(&rt, AHEAD);
    Ok(rt)
}

/// Has `rt` start `n` blocking threads now (each task waits for all the others, so no
/// thread serves two), without waiting for them.
fn start_blocking_threads(rt: &tokio::runtime::Runtime, n: usize) {
    let all = Arc::new(Barrier::new(n));
    for _ in 0..n {
        let all = all.clone();
        drop(rt.spawn_blocking(move || {
            all.wait();
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads() -> usize {
        std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
    }

    #[test]
    fn the_blocking_threads_are_there_before_any_request_and_stay_idle() {
        let before = threads();
        let rt = runtime().expect("runtime");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while threads() < before + AHEAD && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(threads() >= before + AHEAD, "{} threads", threads());
        // Idle past tokio's default keep-alive (10 s): still there for the next burst.
        std::thread::sleep(Duration::from_secs(11));
        assert!(threads() >= before + AHEAD, "{} threads left", threads());
        drop(rt);
    }
}
