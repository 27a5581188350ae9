//! Reading how much memory the host has left (`MemAvailable` of `/proc/meminfo`).

/// The host's `MemAvailable` in MiB; `None` when it cannot be read.
pub fn host_available_mb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_available_mb(&text)
}

fn parse_available_mb(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line
        .trim_start_matches("MemAvailable:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_mem_available_in_mib() {
        let text = "MemTotal:       24683584 kB\nMemFree:  1 kB\nMemAvailable:   2097152 kB\n";
        assert_eq!(super::parse_available_mb(text), Some(2048));
        assert_eq!(super::parse_available_mb("MemTotal: 1 kB\n"), None);
        assert!(super::host_available_mb().is_some_and(|mb| mb > 0));
    }
}
