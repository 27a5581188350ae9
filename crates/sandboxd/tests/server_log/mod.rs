//! What the test fixtures that spawn a server (`serve_bin`, `runzivo_api`) share about
//! it: waiting for a line of its log, and reading its resident memory. Included by path
//! into each fixture's module.

#![allow(dead_code)]

use std::sync::Mutex;

/// Waits until a line of `log` satisfies `found` (for lines logged after an answer,
/// such as a request's own log line); gives up after a minute.
pub fn wait_for_line(log: &Mutex<Vec<String>>, found: impl Fn(&str) -> bool) -> String {
    for _ in 0..6000 {
        let lines = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(line) = lines.into_iter().find(|l| found(l)) {
            return line;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("no such line in the server's log");
}

/// The resident memory of process `pid` in KiB (`VmRSS`).
pub fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}
