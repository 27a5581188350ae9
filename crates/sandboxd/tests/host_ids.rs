//! Host id ranges are host-wide: sandboxes of two servers (two runtimes on two data
//! dirs) on one host never share host uids, and destroy gives each slot back.

mod common;

use common::{runtime, slot_leases, spec};
use sandboxd_runtime::{Runtime, SandboxHandle};

/// The host range `(first, count)` of the uid map of a sandbox's PID 1.
fn host_range(h: &SandboxHandle) -> (u64, u64) {
    let map = std::fs::read_to_string(format!("/proc/{}/uid_map", h.agent_pid)).expect("uid_map");
    let fields: Vec<u64> = map
        .split_whitespace()
        .map(|f| f.parse().expect("number"))
        .collect();
    assert_eq!(fields.len(), 3, "one range expected: {map}");
    (fields[1], fields[2])
}

#[test]
fn two_servers_on_one_host_never_share_host_ids() {
    let (d1, d2) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let (one, two) = (runtime(d1.path()), runtime(d2.path()));
    let mut started: Vec<(&dyn Runtime, SandboxHandle)> = Vec::new();
    for _ in 0..3 {
        started.push((&one, one.start(&spec("default")).expect("start on one")));
        started.push((&two, two.start(&spec("default")).expect("start on two")));
    }
    let ranges: Vec<(u64, u64)> = started.iter().map(|(_, h)| host_range(h)).collect();
    for (i, a) in ranges.iter().enumerate() {
        for b in &ranges[i + 1..] {
            assert!(
                a.0 + a.1 <= b.0 || b.0 + b.1 <= a.0,
                "host uid ranges overlap: {a:?} and {b:?} (all: {ranges:?})"
            );
        }
    }
    assert_eq!(slot_leases(d1.path()).len(), 3);
    assert_eq!(slot_leases(d2.path()).len(), 3);
    for (rt, h) in &started {
        rt.destroy(h).expect("destroy");
    }
    assert_eq!(slot_leases(d1.path()), Vec::<String>::new());
    assert_eq!(slot_leases(d2.path()), Vec::<String>::new());
}
