//! A server's spare network claimed by a one-shot run beside it (`sandboxd run`): the
//! server stops counting it and makes another, and the run's sandbox may reach over
//! DNS the resolver its `resolv.conf` names (the run's, not the server's).
//!
//! Like network_parked.rs, each test runs in a network namespace and with network
//! state of its own: no other test's run claims its spares or sees its table.

mod common;
mod fakenet;
mod netns_common;

use common::{runtime, sh_ok};
use fakenet::{FakeNet, PROBE};
use netns_common::{eventually, named_after, names, net_runtime, table};
use sandboxd_runtime::linux::{LinuxRuntime, NetConfig};
use sandboxd_runtime::{NetworkSpec, Runtime, SandboxHandle};

/// The interface name of a network named after `id`, quoted as `nft` lists it.
fn ifname(id: &str) -> String {
    format!("\"sbx{}\"", &id.replace('-', "")[..12])
}

fn in_own_netns() {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "0");
}

fn start(rt: &LinuxRuntime) -> SandboxHandle {
    rt.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start")
}

#[test]
fn a_server_whose_spare_a_run_claimed_makes_another() {
    in_own_netns();
    let state = tempfile::tempdir().expect("tempdir");
    let (run_dir, server_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let _cleanup = (runtime(run_dir.path()), runtime(server_dir.path()));
    let spares = state.path().join("spares");
    let server = net_runtime(server_dir.path(), state.path()).with_warm_inits(1);
    server.fill_warm_inits(0, false);
    eventually("the server's spare", || server.spare_networks_ready() == 1);
    let first = names(&spares);
    assert_eq!(first.len(), 1, "one spare marker");

    let one_shot = net_runtime(run_dir.path(), state.path()).with_parked_networks();
    let a = start(&one_shot);
    assert_eq!(named_after(state.path(), a.id).as_ref(), Some(&first[0]));

    // Nothing else starts on the server: looking at its spares (as its metrics do)
    // finds the claimed one gone and another made.
    eventually("the server made no spare for the claimed one", || {
        let ready = server.spare_networks_ready();
        let now = names(&spares);
        ready == 1 && now.len() == 1 && now[0] != first[0]
    });
    let made = names(&spares);
    let b = start(&server);
    assert_eq!(
        named_after(state.path(), b.id).as_ref(),
        made.first(),
        "the server's start took its new spare"
    );
    server.destroy(&b).expect("destroy b");
    drop(server);
    assert_eq!(names(&spares), Vec::<String>::new(), "spares left");
    one_shot.destroy(&a).expect("destroy a");
    eventually("the table outlived the linger", || table().is_none());
    assert_eq!(names(&state.path().join("leases")), Vec::<String>::new());
}

#[test]
fn a_run_on_a_claimed_spare_reaches_the_resolver_it_is_told_of() {
    in_own_netns();
    let fake = FakeNet::new();
    let state = tempfile::tempdir().expect("tempdir");
    let (run_dir, server_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let _cleanup = (runtime(run_dir.path()), runtime(server_dir.path()));
    // The server's resolver (192.0.2.53, see net_runtime) is not the run's.
    let server = net_runtime(server_dir.path(), state.path()).with_warm_inits(1);
    server.fill_warm_inits(0, false);
    eventually("the server's spare", || server.spare_networks_ready() == 1);
    let spare = names(&state.path().join("spares"));

    let resolver = fake.addr(2);
    let mut config = NetConfig::from_host();
    config.state_dir = state.path().to_path_buf();
    config.resolvers = vec![resolver.parse().expect("resolver")];
    let one_shot = LinuxRuntime::with_network(common::raw_runtime(run_dir.path()), config)
        .with_parked_networks();
    let a = start(&one_shot);
    assert_eq!(named_after(state.path(), a.id).as_ref(), Some(&spare[0]));

    let told = sh_ok(&a, "cat /etc/resolv.conf");
    assert!(told.contains(&format!("nameserver {resolver}")), "{told}");
    let listed = table().expect("the table");
    let name = ifname(&spare[0]);
    assert!(
        listed.contains(&format!("{name} . {resolver}")),
        "the run's resolver is not among its DNS entries: {listed}"
    );
    assert!(
        !listed.contains(&format!("{name} . 192.0.2.53")),
        "the server's resolver is still among the run's DNS entries: {listed}"
    );
    // The name resolves through the resolver resolv.conf names, and the answer is
    // reachable.
    assert_eq!(
        common::python_probe(&a, PROBE, "good.test", 8080),
        format!("ok {} hello", fake.addr(2))
    );

    drop(server);
    one_shot.destroy(&a).expect("destroy a");
    eventually("the table outlived the linger", || table().is_none());
    assert_eq!(names(&state.path().join("leases")), Vec::<String>::new());
}

/// Regression: a server made a spare for one a run claimed only when it next looked at
/// its count (a start, its metrics); a quiet server stayed without. Its periodic tick now
/// makes another, with no look at all (only the markers on disk are watched here).
#[test]
fn a_quiet_server_whose_spare_a_run_claimed_makes_another_on_its_own() {
    in_own_netns();
    let state = tempfile::tempdir().expect("tempdir");
    let (run_dir, server_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let _cleanup = (runtime(run_dir.path()), runtime(server_dir.path()));
    let spares = state.path().join("spares");
    let server = net_runtime(server_dir.path(), state.path()).with_warm_inits(1);
    server.fill_warm_inits(0, false);
    eventually("the server's spare", || names(&spares).len() == 1);
    let first = names(&spares);

    let one_shot = net_runtime(run_dir.path(), state.path()).with_parked_networks();
    let a = start(&one_shot);
    assert_eq!(named_after(state.path(), a.id).as_ref(), Some(&first[0]));
    eventually("the server made no spare for the claimed one", || {
        let now = names(&spares);
        now.len() == 1 && now[0] != first[0]
    });
    drop(server);
    assert_eq!(names(&spares), Vec::<String>::new(), "spares left");
    one_shot.destroy(&a).expect("destroy a");
    eventually("the table outlived the linger", || table().is_none());
    assert_eq!(names(&state.path().join("leases")), Vec::<String>::new());
}
