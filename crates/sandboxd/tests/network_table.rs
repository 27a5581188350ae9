//! The shared `inet sandboxd` table lives while any sandbox on the host holds a network,
//! whichever data directory it belongs to (a server's and a one-shot run's beside it),
//! and goes away with the last; a table a crash left behind is replaced, not reused.
//!
//! The test runs in a network namespace of its own, with network state (leases) of its
//! own: its ruleset is its alone, so other tests' sandboxes on the host neither keep the
//! table alive nor see it change.

mod common;
mod netns_common;

use common::runtime;
use netns_common::{counted_nft_in_own_netns, net_runtime, nft, table};
use sandboxd_runtime::{EgressPolicy, NetworkSpec, Runtime};
use std::process::{Command, Stdio};

/// The table's listing if it holds entries (set elements) of sandbox `id`'s interface.
fn entries(id: uuid::Uuid) -> Option<String> {
    let ifname = format!("\"sbx{}\"", &id.simple().to_string()[..12]);
    table().filter(|t| t.contains(&ifname))
}

#[test]
fn the_table_lives_while_any_sandbox_runs_and_goes_with_the_last() {
    // This thread (and the threads and processes it starts) in a new network namespace.
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
    assert_eq!(table(), None, "a fresh namespace has no table");
    let state = tempfile::tempdir().expect("tempdir");
    let (server_dir, run_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let _cleanup = (runtime(server_dir.path()), runtime(run_dir.path()));
    let (server, one_shot) = (
        net_runtime(server_dir.path(), state.path()),
        net_runtime(run_dir.path(), state.path()),
    );
    let deny = EgressPolicy {
        allow: vec![],
        deny: vec!["198.51.100.7".parse().expect("deny")],
    };

    let a = server
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![deny]))
        .expect("start a");
    let b = one_shot
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start b");
    assert!(table().is_some() && entries(b.id).is_some());
    one_shot.destroy(&b).expect("destroy b");
    assert!(table().is_some(), "the table went while a still runs");
    entries(a.id).expect("a's entries went with b");
    let a_deny = format!("\"sbx{}\" . 198.51.100.7", &a.id.simple().to_string()[..12]);
    let elements = nft(&["list", "set", "inet", "sandboxd", "deny"]).expect("the deny set");
    assert!(elements.contains(&a_deny), "{elements}");
    server.destroy(&a).expect("destroy a");
    assert_eq!(table(), None, "the table outlived the last sandbox");

    // A table a crash left behind, with a chain of a sandbox long gone: the next start
    // makes the table afresh.
    let stale = "add table inet sandboxd\nadd chain inet sandboxd sb_stale\n";
    let mut child = Command::new("/usr/sbin/nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("nft");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stale.as_bytes())
        .expect("script");
    assert!(child.wait().expect("nft").success(), "making a stale table");
    let c = one_shot
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start c over a stale table");
    let listed = table().expect("the table");
    assert!(
        !listed.contains("sb_stale"),
        "the stale table was kept: {listed}"
    );
    assert!(entries(c.id).is_some());
    one_shot.destroy(&c).expect("destroy c");
    assert_eq!(table(), None);
    let leases = std::fs::read_dir(state.path().join("leases")).map_or(0, |d| d.count());
    assert_eq!(leases, 0, "leases left");
}

/// Destroying one sandbox among others removes all of its entries (its set elements:
/// address, resolvers, policy, NAT source and its /30 in `nets`) with no `nft` run at
/// all (in-process): an `nft` first on PATH records each call.
#[test]
fn a_destroy_among_others_runs_no_nft_and_leaves_no_entry() {
    let nft_calls = counted_nft_in_own_netns(None);

    let state = tempfile::tempdir().expect("tempdir");
    let dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = runtime(dir.path());
    let rt = net_runtime(dir.path(), state.path());
    let start = || {
        rt.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
            .expect("start")
    };
    let (a, b, c) = (start(), start(), start());
    let net = |id| rt.sandbox_address(id).expect("address");
    let b_net = net(b.id);
    let b_slash30 = std::net::Ipv4Addr::from(u32::from(b_net) - 2).to_string();
    let calls = || nft_calls.count();
    let before = calls();
    rt.destroy(&b).expect("destroy b");
    assert_eq!(calls() - before, 0, "nft runs for one destroy");
    let listed = table().expect("the table");
    let nets = nft(&["list", "set", "inet", "sandboxd", "nets"]).expect("nets");
    let words: Vec<&str> = nets
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .collect();
    assert!(!words.contains(&b_slash30.as_str()), "b's /30 left: {nets}");
    let b_key = &b.id.simple().to_string()[..12];
    assert!(!listed.contains(b_key), "b's entries left: {listed}");
    assert!(entries(a.id).is_some() && entries(c.id).is_some());
    for sb in [&a, &c] {
        rt.destroy(sb).expect("destroy");
    }
    assert_eq!(table(), None);
}

/// Cold egress starts arriving together run no `nft` at all (their elements go in
/// in-process netlink batches, shared by the starts queued at once), and each gets its
/// own entries. An `nft` first on PATH records each call.
#[test]
fn starts_arriving_together_run_no_nft() {
    let nft_calls = counted_nft_in_own_netns(None);

    let state = tempfile::tempdir().expect("tempdir");
    let dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = runtime(dir.path());
    let rt = net_runtime(dir.path(), state.path());
    let start = || {
        rt.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
            .expect("start")
    };
    let first = start(); // makes the table
    let calls = || nft_calls.count();
    let before = calls();
    const TOGETHER: usize = 6;
    let handles: Vec<_> = std::thread::scope(|s| {
        let starts: Vec<_> = (0..TOGETHER).map(|_| s.spawn(start)).collect();
        starts
            .into_iter()
            .map(|t| t.join().expect("a start"))
            .collect()
    });
    let runs = calls() - before;
    assert_eq!(runs, 0, "nft runs for {TOGETHER} starts");
    for h in &handles {
        assert!(entries(h.id).is_some(), "{}'s chain", h.id);
        assert!(rt.sandbox_address(h.id).is_some());
    }
    for h in handles.iter().chain([&first]) {
        rt.destroy(h).expect("destroy");
    }
    assert_eq!(table(), None);
}
