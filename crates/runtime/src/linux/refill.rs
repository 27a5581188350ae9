//! What the warm inits and the spare networks share: one background refill at a time,
//! started after a short delay (the sandbox just started gets the CPUs for its first
//! exec), and owner marks (PID and start time) by which a later process tells a dead
//! owner's leftovers from a live one's.

use super::sys;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a refill waits before it starts.
const DELAY: Duration = Duration::from_millis(25);
/// How long a drain waits for a refill in flight.
const DRAIN_WAIT: Duration = Duration::from_secs(30);

/// Runs `fill(shared)` on a thread named `name` unless one runs already (`filling`).
pub(super) fn spawn<S: Send + Sync + 'static>(
    shared: &Arc<S>,
    filling: fn(&S) -> &AtomicBool,
    name: &str,
    fill: fn(&S),
) {
    if filling(shared).swap(true, Ordering::AcqRel) {
        return;
    }
    let s = shared.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            std::thread::sleep(DELAY);
            fill(&s);
            filling(&s).store(false, Ordering::Release);
        });
    if spawned.is_err() {
        filling(shared).store(false, Ordering::Release);
    }
}

/// How often a pool that was ever filled checks it is at its size, and refills if not
/// (a refill that gave up, entries claimed away): it recovers with no start.
pub(super) const TICK: Duration = Duration::from_secs(5);

/// Every [`TICK`], for as long as the pool `shared` lives (dropped, or `closed`): calls
/// `refill` when `due` says so (`due` sees whether a refill runs already).
pub(super) fn spawn_tick<S: Send + Sync + 'static>(
    shared: std::sync::Weak<S>,
    name: &str,
    closed: fn(&S) -> &AtomicBool,
    due: fn(&S) -> bool,
    refill: fn(&Arc<S>),
) {
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || loop {
            std::thread::sleep(TICK);
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if closed(&shared).load(Ordering::Acquire) {
                return;
            }
            if due(&shared) {
                refill(&shared);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no periodic refill ({name})");
    }
}

/// Failed makes in a row one refill retries before it gives up (until the next start,
/// or a pool's tick).
const RETRIES: u32 = 5;

/// After the `failures`-th failed make in a row (1-based) of a refill of `what`: waits
/// (250 ms, doubling, at most 4 s) and says to retry, unless the retries are spent or
/// `closed` is set meanwhile. Logged either way.
pub(super) fn retry_after_failure(failures: u32, closed: &AtomicBool, what: &str) -> bool {
    if failures > RETRIES {
        tracing::warn!(
            tries = failures,
            "{what}: making one keeps failing; giving up until the next refill"
        );
        return false;
    }
    let wait = Duration::from_millis(250 << (failures.saturating_sub(1)).min(4));
    tracing::info!(retry = failures, ?wait, "{what}: a make failed; retrying");
    let until = Instant::now() + wait;
    while Instant::now() < until {
        if closed.load(Ordering::Acquire) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !closed.load(Ordering::Acquire)
}

/// Waits (bounded) until no refill runs: one in flight removes its own entry once it
/// sees the pool closed.
pub(super) fn wait_idle(filling: &AtomicBool) {
    let deadline = Instant::now() + DRAIN_WAIT;
    while filling.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// This process's owner mark: `"<pid> <start ticks>"` (read from /proc once per
/// process: each warm start records it twice).
pub(super) fn owner_mark() -> String {
    static MARK: std::sync::Mutex<Option<(u32, String)>> = std::sync::Mutex::new(None);
    let me = std::process::id();
    let mut kept = MARK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match &*kept {
        // A forked child has a pid of its own: its mark is made anew.
        Some((pid, mark)) if *pid == me => mark.clone(),
        _ => match sys::proc_stat(me as i32) {
            Some((_, ticks)) => {
                let mark = format!("{me} {ticks}");
                *kept = Some((me, mark.clone()));
                mark
            }
            // Not kept: the next mark reads /proc again.
            None => format!("{me} 0"),
        },
    }
}

/// Whether the process an owner mark names still runs (a malformed mark: no). Marks
/// are written whole (`whole_file`), so an owner file is absent or complete: one that
/// holds no complete mark (empty) was left by a server of an earlier version, which
/// created the file and then wrote the mark, killed in between: a dead owner's.
pub(super) fn owner_alive(mark: &str) -> bool {
    let mut fields = mark.split_whitespace().map(|f| f.parse::<u64>().ok());
    match (fields.next().flatten(), fields.next().flatten()) {
        (Some(pid), Some(ticks)) => sys::is_same_live_process(pid as i32, ticks),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_mark_is_alive_and_junk_is_not() {
        assert!(owner_alive(&owner_mark()));
        // Read once, the same after.
        let (_, ticks) = sys::proc_stat(std::process::id() as i32).expect("own stat");
        assert_eq!(owner_mark(), format!("{} {ticks}", std::process::id()));
        assert_eq!(owner_mark(), owner_mark());
        assert!(!owner_alive("999999999 1"));
        assert!(!owner_alive("junk"));
    }

    #[test]
    fn an_incomplete_mark_is_a_dead_owners() {
        // An earlier version's owner file created, its mark never written.
        assert!(!owner_alive(""));
        assert!(!owner_alive("12"));
        assert!(!owner_alive(&format!("{} junk", std::process::id())));
    }
}
