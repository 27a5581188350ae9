//! The server's async runtime, with its blocking threads started ahead of the first
//! burst of requests and kept while bursts may come back.
//!
//! Each create or exec runs its runtime and store calls on tokio's blocking pool, which
//! starts a thread when none is idle and ends one idle for its keep-alive (10 s by
//! default). A first burst of 20 creates therefore started ~17 threads on its way
//! (measured here: 8 threads idle, 25 at the burst's peak), and a burst after ten quiet
//! seconds did again.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

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

/// How long each of those first tasks waits for the others. Bounded: where fewer
/// threads can start (a tasks limit), tokio queues the rest, and a task waiting for
/// those for ever would hold its thread, and with it every request's blocking call.
const GATHER: Duration = Duration::from_secs(2);

/// Has `rt` start `n` blocking threads now (each task waits, up to [`GATHER`], until all
/// have begun, so no thread serves two), without waiting for them.
fn start_blocking_threads(rt: &tokio::runtime::Runtime, n: usize) {
    let begun = Arc::new((Mutex::new(0usize), Condvar::new()));
    for _ in 0..n {
        let begun = begun.clone();
        drop(rt.spawn_blocking(move || {
            let (count, all_in) = &*begun;
            let deadline = Instant::now() + GATHER;
            let mut count = count.lock().unwrap_or_else(|p| p.into_inner());
            *count += 1;
            all_in.notify_all();
            while *count < n {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                count = all_in
                    .wait_timeout(count, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
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

    /// Where fewer threads can start than asked for (here: more asked than the pool
    /// may have), those that did start give up waiting, and the pool serves calls again.
    #[test]
    fn the_pool_serves_even_when_not_all_threads_could_start() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .max_blocking_threads(4)
            .build()
            .expect("runtime");
        start_blocking_threads(&rt, 8);
        let answered = rt.block_on(async {
            tokio::time::timeout(GATHER * 5, tokio::task::spawn_blocking(|| 42)).await
        });
        assert_eq!(
            answered.expect("served within the bound").expect("task"),
            42
        );
    }
}
