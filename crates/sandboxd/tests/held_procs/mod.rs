//! Process helpers of the held-init tests: a process's state, command line and
//! children from /proc, and polling until something holds.

// Each test file that loads these uses some of them.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Whether `pid` is gone or a zombie (it exited; its reaper may not have looked yet).
pub fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state is the first field after the parenthesised command.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// `pid`'s command line, its arguments joined by spaces (empty once it is gone).
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Processes whose parent is `ppid`.
pub fn children_of(ppid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("PPid:"))
                    .is_some_and(|p| p.trim() == ppid.to_string())
            })
        })
        .collect()
}

/// Polls `done` every 20 ms until it holds; fails the test after a minute.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
