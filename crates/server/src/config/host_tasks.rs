//! `pids_per_sandbox` (`SANDBOXD_PIDS_PER_SANDBOX`): the task limit of each sandbox. Unset,
//! it is derived from the host's task table (the smaller of `kernel.pid_max` and
//! `kernel.threads-max`) so that `max_sandboxes` sandboxes, each at its limit, hold at
//! most three quarters of it: one tenant's sandboxes can no longer take every PID the
//! host, the server and other tenants need. At most 1024 by default, at least 32.

use std::path::Path;

/// The derived limit's ceiling (the fixed limit of earlier versions).
pub const DEFAULT_CEILING: u32 = 1024;
/// The smallest limit accepted or derived: the agent, a shell and a few commands.
pub const MIN: u32 = 32;
/// The largest limit accepted (Linux's own `PID_MAX_LIMIT`).
pub const MAX: u32 = 4 * 1024 * 1024;

/// The host's task table: the smaller of `kernel.pid_max` and `kernel.threads-max`,
/// `None` when neither can be read.
pub fn host_tasks() -> Option<u64> {
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(Path::new("/proc/sys/kernel").join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    match (read("pid_max"), read("threads-max")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The limit for `max_sandboxes` sandboxes on a host of `tasks` tasks.
pub fn derived(max_sandboxes: u32, tasks: Option<u64>) -> u32 {
    match tasks {
        Some(tasks) => {
            let share = tasks.saturating_mul(3) / 4 / u64::from(max_sandboxes.max(1));
            share.clamp(u64::from(MIN), u64::from(DEFAULT_CEILING)) as u32
        }
        None => DEFAULT_CEILING,
    }
}

/// Why a configured limit is refused, if it is.
pub fn refused(n: u32) -> Option<String> {
    (!(MIN..=MAX).contains(&n))
        .then(|| format!("pids_per_sandbox {n} is not between {MIN} and {MAX}"))
}

/// A warning for the log when `max_sandboxes` sandboxes at `per_sandbox` tasks each could
/// take more than three quarters of a host of `tasks` tasks.
pub fn oversubscribed(per_sandbox: u32, max_sandboxes: u32, tasks: Option<u64>) -> Option<String> {
    let tasks = tasks?;
    let all = u64::from(per_sandbox) * u64::from(max_sandboxes);
    (all > tasks.saturating_mul(3) / 4).then(|| {
        format!(
            "{max_sandboxes} sandboxes of {per_sandbox} tasks each could hold {all} tasks, \
             over three quarters of the host's {tasks} (kernel.pid_max / threads-max): one \
             tenant could leave the host and other sandboxes unable to fork"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_leaves_a_quarter_of_the_hosts_tasks() {
        assert_eq!(derived(100, Some(32768)), 245);
        assert!(u64::from(derived(100, Some(32768))) * 100 <= 32768 * 3 / 4);
        assert_eq!(derived(100, Some(4_194_304)), DEFAULT_CEILING);
        assert_eq!(derived(10_000, Some(32768)), MIN);
        assert_eq!(derived(0, Some(32768)), DEFAULT_CEILING);
        assert_eq!(derived(100, None), DEFAULT_CEILING);
    }

    #[test]
    fn limits_outside_the_range_are_refused_and_oversubscription_is_told() {
        assert!(refused(31).is_some());
        assert!(refused(32).is_none());
        assert!(refused(MAX + 1).is_some());
        assert!(oversubscribed(1024, 100, Some(32768)).is_some());
        assert!(oversubscribed(245, 100, Some(32768)).is_none());
        assert!(oversubscribed(1024, 100, None).is_none());
    }
}
