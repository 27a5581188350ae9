//! The server process's own CPU time and resident memory, from `/proc/self`.

/// CPU seconds (user + system) and resident bytes of this process.
pub(super) struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
}

/// Reads `/proc/self/stat`; `None` if it cannot be read or parsed.
pub(super) fn measure() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (utime, stime, rss_pages) = parse_stat(&stat)?;
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let page = rustix::param::page_size() as u64;
    Some(ProcessStats {
        cpu_seconds: (utime + stime) as f64 / ticks,
        resident_bytes: rss_pages * page,
    })
}

/// (utime, stime, rss) of a `/proc/PID/stat` line (fields 14, 15 and 24).
fn parse_stat(stat: &str) -> Option<(u64, u64, u64)> {
    // The command name (field 2) may hold spaces and parentheses: fields after it are
    // counted from its last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some((field(14)?, field(15)?, field(24)?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn stat_fields_after_an_odd_name() {
        let stat = "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 9 1000 77 18446744073709551615";
        assert_eq!(super::parse_stat(stat), Some((250, 50, 77)));
    }
}
