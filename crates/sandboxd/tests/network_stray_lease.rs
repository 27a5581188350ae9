//! A network lease whose maker died with nothing of its sandbox left (its start failed,
//! or its data dir was removed since) is taken back by the next process that opens
//! networking on the host: its link, set elements and lease go, and the shared table
//! with the last lease. Before, such a lease stayed for good, and kept the shared
//! `inet sandboxd` table and `ip_forward` with it (seen once in CI).
//!
//! The test runs in a network namespace of its own, with network state of its own.

mod common;
mod netns_common;

use netns_common::{net_runtime, table};
use sandboxd_runtime::{NetworkSpec, Runtime};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Env var naming the network state dir [`helper_dies_holding_a_lease`] uses.
const STATE: &str = "STRAY_LEASE_TEST_STATE";
/// Env var naming its data dir.
const DATA: &str = "STRAY_LEASE_TEST_DATA";

/// Not a test of its own: run by [`a_lease_whose_maker_died_without_its_sandbox_is_taken_back`]
/// as a child process in the test's network namespace. Its sandbox's start fails at
/// once while its host side (lease, set elements, shared table) is made and then held:
/// the parent kills it there, as a server killed mid-create would be.
#[test]
#[ignore = "a helper process of a_lease_whose_maker_died_without_its_sandbox_is_taken_back"]
fn helper_dies_holding_a_lease() {
    let (Some(state), Some(data)) = (std::env::var_os(STATE), std::env::var_os(DATA)) else {
        return;
    };
    fail::cfg("start.cgroup", "return").expect("fail the start");
    fail::cfg("network.prepare", "pause").expect("hold the host side");
    let rt = net_runtime(Path::new(&data), Path::new(&state));
    println!("starting");
    let _ = rt.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]));
    unreachable!("the start returned past its paused host side");
}

fn lease_files(state: &Path) -> Vec<String> {
    std::fs::read_dir(state.join("leases"))
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn sandbox_dirs(data: &Path) -> usize {
    std::fs::read_dir(data.join("sandboxes")).map_or(0, |d| d.count())
}

#[test]
fn a_lease_whose_maker_died_without_its_sandbox_is_taken_back() {
    // This thread, and the helper it starts, in a new network namespace.
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
    let state = tempfile::tempdir().expect("tempdir");
    let (dead_dir, next_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let _cleanup = (
        common::runtime(dead_dir.path()),
        common::runtime(next_dir.path()),
    );
    let mut helper = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "helper_dies_holding_a_lease",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(STATE, state.path())
        .env(DATA, dead_dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the helper");
    let out = BufReader::new(helper.stdout.take().expect("stdout"));
    let started = out
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("starting"));
    assert!(started, "the helper did not start");
    // Its lease and the table made (the lease comes first), and its failed start's
    // state dir removed: then it is killed.
    let deadline = Instant::now() + Duration::from_secs(120);
    let held = || lease_files(state.path()).len() == 1 && table().is_some();
    while !held() || sandbox_dirs(dead_dir.path()) != 0 {
        assert!(Instant::now() < deadline, "the helper never held its lease");
        std::thread::sleep(Duration::from_millis(50));
    }
    helper.kill().expect("kill the helper");
    helper.wait().expect("reap the helper");
    assert!(table().is_some(), "the dead helper's table is there");

    // The next process to open networking on the host takes the lease back.
    let _next = net_runtime(next_dir.path(), state.path());
    assert_eq!(
        lease_files(state.path()),
        Vec::<String>::new(),
        "the dead maker's lease stayed"
    );
    assert_eq!(
        table(),
        None,
        "the table stayed with no sandbox on the host"
    );
}
