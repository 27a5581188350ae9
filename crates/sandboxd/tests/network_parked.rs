//! Parked egress networks (what `sandboxd run` does at destroy): a one-shot runtime
//! keeps its sandbox's plain host side (lease, chain) and the shared table for the next
//! sandbox without a policy, which takes it over with no `nft` run; a sandbox with a
//! policy neither takes one nor is parked; a detached reaper removes what is parked
//! once it has lingered untaken, the table and `ip_forward` with the last, also when
//! an earlier reaper was killed (the next runtime opening the state starts another);
//! the host's other tables are untouched.
//!
//! Like network_table.rs, the test runs in a network namespace and with network state
//! of its own: no other test's sandbox takes its parked network or sees its table.

mod common;
mod netns_common;

use common::{runtime, tracked_from};
use netns_common::{
    counted_nft_in_own_netns, eventually, named_after, names, net_runtime, nft, reapers, table,
};
use sandboxd_runtime::linux::LinuxRuntime;
use sandboxd_runtime::{EgressPolicy, NetworkSpec, Runtime};
use std::process::{Command, Stdio};

/// The table's listing if it holds entries of the interface named after `id`.
fn entries_named_after(id: &str) -> Option<String> {
    let ifname = format!("\"sbx{}\"", &id.replace('-', "")[..12]);
    table().filter(|t| t.contains(&ifname))
}

fn link_named_after(id: &str) -> bool {
    let ifname = format!("sbx{}", &id.replace('-', "")[..12]);
    Command::new("ip")
        .args(["link", "show", &ifname])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_run_parks_its_network_for_the_next_and_a_reaper_removes_it_after_the_linger() {
    // An `nft` first on PATH records each call; nextest runs each test in a process of
    // its own, so this PATH and these variables are this test's alone.
    let nft_calls = counted_nft_in_own_netns(None);
    // Long enough that nothing parked expires while the test looks at it.
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "3600");
    let calls = || nft_calls.count();
    // Someone else's table, which sandboxd must leave alone.
    assert!(
        nft(&["add", "table", "inet", "other"]).is_some(),
        "another table"
    );
    let forward = || std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("read");
    let forward_before = forward();

    let state = tempfile::tempdir().expect("tempdir");
    let (run_dir, server_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let _cleanup = (runtime(run_dir.path()), runtime(server_dir.path()));
    let one_shot = net_runtime(run_dir.path(), state.path()).with_parked_networks();
    let plain = NetworkSpec::egress(vec![]);
    let start = |rt: &LinuxRuntime, net: &NetworkSpec| {
        rt.start_with_network(&common::spec("default"), net)
            .expect("start")
    };

    // The first run makes the table and its network, and parks it at destroy.
    let a = start(&one_shot, &plain);
    let a_name = named_after(state.path(), a.id).expect("a's lease");
    one_shot.destroy(&a).expect("destroy a");
    assert!(table().is_some(), "the table went with the run's sandbox");
    assert!(
        entries_named_after(&a_name).is_some(),
        "a's chain was removed"
    );
    assert!(!link_named_after(&a_name), "a's link is left");
    assert_eq!(
        names(&state.path().join("parked")),
        std::slice::from_ref(&a_name)
    );
    assert_eq!(
        names(&state.path().join("leases")),
        std::slice::from_ref(&a_name)
    );
    eventually("no reaper started", || reapers().len() == 1);

    // The next takes it over: its start and destroy run no nft at all.
    let before = calls();
    let b = start(&one_shot, &plain);
    assert_eq!(named_after(state.path(), b.id), Some(a_name.clone()));
    assert_eq!(names(&state.path().join("parked")), Vec::<String>::new());
    assert!(one_shot.sandbox_address(b.id).is_some());
    one_shot.destroy(&b).expect("destroy b");
    assert_eq!(calls() - before, 0, "nft runs for a start and destroy");
    assert_eq!(
        names(&state.path().join("parked")),
        std::slice::from_ref(&a_name)
    );

    // A sandbox with a policy takes none, and is not parked (its chain goes).
    let deny = EgressPolicy {
        allow: vec![],
        deny: vec!["198.51.100.7".parse().expect("deny")],
    };
    let c = start(&one_shot, &NetworkSpec::egress(vec![deny]));
    let c_name = named_after(state.path(), c.id).expect("c's lease");
    assert_ne!(
        c_name, a_name,
        "a sandbox with a policy took the parked network"
    );
    one_shot.destroy(&c).expect("destroy c");
    assert!(
        entries_named_after(&c_name).is_none(),
        "c's entries were kept"
    );
    assert_eq!(
        names(&state.path().join("parked")),
        std::slice::from_ref(&a_name)
    );

    // A server beside (not one-shot) takes the parked network too, and removes it
    // at its sandbox's destroy as it would its own; the run then parks a new one.
    let server = net_runtime(server_dir.path(), state.path());
    let d = start(&server, &plain);
    assert_eq!(named_after(state.path(), d.id), Some(a_name.clone()));
    let e = start(&one_shot, &plain);
    server.destroy(&d).expect("destroy d");
    assert!(
        entries_named_after(&a_name).is_none(),
        "d's entries were kept"
    );
    one_shot.destroy(&e).expect("destroy e");
    let e_name = names(&state.path().join("parked"));
    assert_eq!(e_name.len(), 1, "e's network was not parked");

    // Killed, the reaper leaves the parked network; the next runtime opening the
    // state starts another, which removes it once it has lingered.
    for pid in reapers() {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL)
            .expect("kill the reaper");
    }
    eventually("the killed reaper is gone", || reapers().is_empty());
    assert!(table().is_some() && entries_named_after(&e_name[0]).is_some());
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "0");
    let _reopened = net_runtime(server_dir.path(), state.path());
    eventually("the table outlived the linger", || table().is_none());
    eventually("the reaper stays", || reapers().is_empty());
    assert_eq!(names(&state.path().join("parked")), Vec::<String>::new());
    assert_eq!(names(&state.path().join("leases")), Vec::<String>::new());
    assert!(!link_named_after(&e_name[0]));
    assert_eq!(forward(), forward_before, "ip_forward not restored");
    assert!(
        nft(&["list", "table", "inet", "other"]).is_some(),
        "another table was touched"
    );
}

#[test]
fn a_run_beside_a_server_takes_a_server_spare_which_the_server_then_leaves_alone() {
    let nft_calls = counted_nft_in_own_netns(None);
    // Long enough that nothing parked expires while the test looks at it.
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "3600");
    let calls = || nft_calls.count();
    let state = tempfile::tempdir().expect("tempdir");
    let (run_dir, server_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let _cleanup = (runtime(run_dir.path()), runtime(server_dir.path()));
    let plain = NetworkSpec::egress(vec![]);
    let start = |rt: &LinuxRuntime, net: &NetworkSpec| {
        rt.start_with_network(&common::spec("default"), net)
            .expect("start")
    };
    // A server's runtime: one warm init (not wired) and one spare network.
    let server = net_runtime(server_dir.path(), state.path()).with_warm_inits(1);
    server.fill_warm_inits(0, false);
    eventually("the server's spare", || server.spare_networks_ready() == 1);
    let spare = names(&state.path().join("spares"));
    assert_eq!(spare.len(), 1, "one spare marker");

    // The run's start takes it: no network setup of its own.
    let one_shot = net_runtime(run_dir.path(), state.path()).with_parked_networks();
    let before = calls();
    let a = start(&one_shot, &plain);
    assert_eq!(named_after(state.path(), a.id).as_ref(), Some(&spare[0]));
    assert_eq!(
        calls() - before,
        0,
        "nft runs for a run's start beside a server"
    );
    assert!(one_shot.sandbox_address(a.id).is_some());

    // The server's next start finds its spare gone and makes a network of its own;
    // its stop removes its own spares and not the run's network.
    let b = start(&server, &plain);
    let b_name = named_after(state.path(), b.id).expect("b's lease");
    assert_ne!(b_name, spare[0], "the server took the claimed spare");
    server.destroy(&b).expect("destroy b");
    drop(server);
    assert!(
        entries_named_after(&spare[0]).is_some() && link_named_after(&spare[0]),
        "the server's stop removed the run's network"
    );
    assert_eq!(names(&state.path().join("spares")), Vec::<String>::new());
    // Parked at destroy (see the test above) for a reaper that lingers no more.
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "0");
    one_shot.destroy(&a).expect("destroy a");
    eventually("the table outlived the linger", || table().is_none());
    eventually("the reaper stays", || reapers().is_empty());
    assert_eq!(names(&state.path().join("leases")), Vec::<String>::new());
    assert!(!link_named_after(&spare[0]));
}

/// A veth pair whose both ends are in this test's own namespace, `d0` addressed in
/// 192.0.2.0/24: where the sandboxes' datagrams to a documentation address are
/// forwarded (and tracked), and no one answers them.
fn veth_pair_to_nowhere() {
    let ip = |args: &[&str]| {
        let ok = Command::new("ip").args(args).status().expect("ip");
        assert!(ok.success(), "ip {args:?}");
    };
    ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"]);
    ip(&["addr", "add", "192.0.2.1/24", "dev", "d0"]);
    ip(&["link", "set", "d0", "up"]);
    ip(&["link", "set", "d1", "up"]);
}

/// A parked network's address goes to the next run: the flows its sandbox opened are
/// forgotten at park, as at a destroy (see `network.rs`), now that an idle sandbox's
/// teardown skips that look (its link received nothing). The flow here is one UDP
/// datagram forwarded out of a veth pair whose both ends are in this test's own
/// namespace (to a documentation address no one answers: nothing leaves it).
#[test]
fn a_parked_networks_tracked_connections_are_forgotten() {
    let _nft_calls = counted_nft_in_own_netns(None);
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "3600");
    veth_pair_to_nowhere();
    let state = tempfile::tempdir().expect("tempdir");
    let run_dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = runtime(run_dir.path());
    let one_shot = net_runtime(run_dir.path(), state.path()).with_parked_networks();
    let a = one_shot
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start");
    let addr = one_shot.sandbox_address(a.id).expect("a's address");
    let send = "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"192.0.2.9\", 9))";
    let (code, out) = common::agent_sh(&a, &format!("/usr/bin/python3 -c '{send}'"));
    assert_eq!(code, Some(0), "send: {out}");
    assert!(
        !tracked_from(addr).is_empty(),
        "the datagram's flow is not tracked"
    );
    let a_name = named_after(state.path(), a.id).expect("a's lease");
    one_shot.destroy(&a).expect("destroy a");
    assert_eq!(
        names(&state.path().join("parked")),
        std::slice::from_ref(&a_name),
        "a's network was not parked"
    );
    assert_eq!(
        tracked_from(addr),
        Vec::<String>::new(),
        "tracked after park"
    );
    drop(one_shot);
    end_reapers();
}

/// Kills this test's lingering reapers and waits until they are gone. What they would
/// have removed (the parked network's link and the table) is in this test's own
/// network namespace, which goes with the test; its state dir is a temporary one. No
/// reaper is started again, so none can recreate that dir once it is removed.
fn end_reapers() {
    for pid in reapers() {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL)
            .expect("kill the reaper");
    }
    eventually("the killed reaper is gone", || reapers().is_empty());
}

/// A sandbox that sent nothing has no flows to forget, and its teardown does not look
/// for any (that look walks the host's whole table: ~12 ms of system time here), on
/// both paths: parked by a one-shot runtime, removed by a server's. Seen from outside by
/// a canary: a tracked flow with the sandbox's address as its source that the host
/// made itself (a datagram sent from this test's namespace from that address, by a
/// transparent socket),
/// which a look would have deleted. Before, every teardown looked, and the first version
/// of the skip read the link's counter once the sandbox's namespace, and its link, were
/// gone (so never skipped).
#[test]
fn an_idle_sandboxs_teardown_leaves_the_hosts_connection_tracking_alone() {
    let _nft_calls = counted_nft_in_own_netns(None);
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "3600");
    veth_pair_to_nowhere();
    let canary = |addr: std::net::Ipv4Addr| {
        let send = "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.setsockopt(socket.SOL_IP, 19, 1)\ns.bind((sys.argv[1], 0))\ns.sendto(b\"x\", (\"192.0.2.9\", 9))";
        let ok = Command::new("python3")
            .args(["-c", send, &addr.to_string()])
            .status()
            .expect("python3");
        assert!(ok.success(), "the canary's datagram");
        assert!(!tracked_from(addr).is_empty(), "the canary is not tracked");
    };
    let state = tempfile::tempdir().expect("tempdir");
    let (run_dir, server_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let _cleanup = (runtime(run_dir.path()), runtime(server_dir.path()));
    let one_shot = net_runtime(run_dir.path(), state.path()).with_parked_networks();
    let server = net_runtime(server_dir.path(), state.path());
    for (rt, path) in [(&one_shot, "parked"), (&server, "removed")] {
        let sb = rt
            .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
            .expect("start");
        let addr = rt.sandbox_address(sb.id).expect("address");
        // The sandbox runs a command that sends nothing.
        assert_eq!(common::agent_sh(&sb, "true").0, Some(0));
        canary(addr);
        rt.destroy(&sb).expect("destroy");
        if path == "parked" {
            // (The server's start then takes it.)
            assert_eq!(names(&state.path().join("parked")).len(), 1, "not parked");
        }
        assert!(
            !tracked_from(addr).is_empty(),
            "the teardown ({path}) of a sandbox that sent nothing looked for its flows"
        );
    }
    drop((one_shot, server));
    end_reapers();
}
