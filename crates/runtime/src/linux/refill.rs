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

/// This process's owner mark: `"<pid> <start ticks>"`.
pub(super) fn owner_mark() -> String {
    let me = std::process::id();
    let ticks = sys::proc_stat(me as i32).map_or(0, |(_, t)| t);
    format!("{me} {ticks}")
}

/// Whether the process an owner mark names still runs (a malformed mark: no).
pub(super) fn owner_alive(mark: &str) -> bool {
    let mut fields = mark.split_whitespace().map(|f| f.parse::<u64>().ok());
    match (fields.next().flatten(), fields.next().flatten()) {
        (Some(pid), Some(ticks)) => sys::is_same_live_process(pid as i32, ticks),
        _ => false,
    }
}

/// How long an owner file may hold no complete mark before it counts as a dead
/// owner's: a make creates the file, then writes the mark (one short write), so a sweep
/// in between reads it empty while its maker lives on. Only a maker killed in that
/// instant leaves one empty for longer.
const OWNER_WRITE_GRACE: Duration = Duration::from_secs(60);

/// Whether the owner file at `path` (read as `mark`) names a process that is gone, or
/// holds no complete mark and was written longer ago than [`OWNER_WRITE_GRACE`] (one
/// written just now is a make under way, never a dead owner's).
pub(super) fn owner_gone(path: &std::path::Path, mark: &str) -> bool {
    if mark_parses(mark) {
        return !owner_alive(mark);
    }
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok());
    age.is_none_or(|age| age > OWNER_WRITE_GRACE)
}

fn mark_parses(mark: &str) -> bool {
    let mut fields = mark.split_whitespace().map(|f| f.parse::<u64>().ok());
    matches!(
        (fields.next(), fields.next(), fields.next()),
        (Some(Some(_)), Some(Some(_)), None)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_mark_is_alive_and_junk_is_not() {
        assert!(owner_alive(&owner_mark()));
        assert!(!owner_alive("999999999 1"));
        assert!(!owner_alive("junk"));
    }

    #[test]
    fn an_owner_file_being_written_is_no_dead_owners() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("owner");
        std::fs::write(&path, "").expect("owner");
        // Just created, its mark not written yet: a make under way.
        assert!(!owner_gone(&path, ""));
        assert!(!owner_gone(&path, "12"));
        assert!(!owner_gone(&path, &owner_mark()));
        assert!(owner_gone(&path, "999999999 1"));
        let old = std::time::SystemTime::now() - OWNER_WRITE_GRACE - Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(old))
            .expect("age the file");
        // Left empty for longer: its maker was killed in that instant.
        assert!(owner_gone(&path, ""));
        assert!(owner_gone(&dir.path().join("missing"), ""));
    }
}
