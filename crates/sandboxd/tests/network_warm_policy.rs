//! Sandboxes under an egress policy start from wired warm entries: the first under a
//! policy takes one made with none and has its chain rewritten, the refill then keeps
//! entries made for that policy, and a policy change is what the next sandbox gets.
//! Enforcement is checked with real traffic to a fake host in a network namespace the
//! test makes (see `fakenet`); nothing leaves the machine.

mod common;
mod fakenet;

use common::{runtime, wait_for};
use fakenet::{FakeNet, DNS_PROBE, PROBE};
use sandboxd_runtime::linux::{LinuxRuntime, NetConfig};
use sandboxd_runtime::{EgressPolicy, NetworkSpec, Runtime, SandboxHandle};
use std::net::{Ipv4Addr, TcpListener};

fn probe(handle: &SandboxHandle, host: &str, port: u16) -> String {
    common::python_probe(handle, PROBE, host, port)
}

fn egress(allow: &[&str], deny: &[&str]) -> NetworkSpec {
    let rules = |l: &[&str]| l.iter().map(|r| r.parse().expect("rule")).collect();
    NetworkSpec::egress(vec![EgressPolicy {
        allow: rules(allow),
        deny: rules(deny),
    }])
}

/// Starts a sandbox under `network`, asserting it took a warm entry (its dir, renamed,
/// holds the entry's `owner` file).
fn start_warm(rt: &LinuxRuntime, network: &NetworkSpec) -> SandboxHandle {
    let sb = rt
        .start_with_network(&common::spec("default"), network)
        .expect("start");
    assert!(
        sb.state_dir.join("owner").exists(),
        "a sandbox under a policy started cold"
    );
    sb
}

/// What `sb` reaches among the fake hosts .2 and .3 (by address), bad.test (.4, by
/// name) and the host itself (through its gateway).
fn reach(rt: &LinuxRuntime, sb: &SandboxHandle, fake: &FakeNet, host: &TcpListener) -> [bool; 4] {
    let addr = rt.sandbox_address(sb.id).expect("sandbox address");
    let gateway = Ipv4Addr::from(u32::from(addr) - 1).to_string();
    let port = host.local_addr().expect("port").port();
    [
        probe(sb, &fake.addr(2), 8080).starts_with("ok"),
        probe(sb, &fake.addr(3), 8080).starts_with("ok"),
        probe(sb, "bad.test", 8080).starts_with("ok"),
        probe(sb, &gateway, port).starts_with("ok"),
    ]
}

/// A runtime on `data` keeping one wired warm init, the fake host its resolver, and
/// one that destroys what is left when dropped.
fn wired_runtime(fake: &FakeNet, data: &std::path::Path) -> (common::TestRuntime, LinuxRuntime) {
    let mut config = NetConfig::from_host();
    config.resolvers = vec![fake.addr(2).parse().expect("resolver")];
    let cleanup = runtime(data);
    let rt = LinuxRuntime::with_network(common::raw_runtime(data), config).with_warm_inits(1);
    rt.fill_warm_inits(0, true);
    (cleanup, rt)
}

#[test]
fn policy_sandboxes_start_warm_and_policy_changes_reach_the_warm_entries() {
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (_cleanup, rt) = wired_runtime(&fake, dir.path());
    let host = TcpListener::bind("0.0.0.0:0").expect("host listener");
    let mut started = Vec::new();

    // Policy A denies .3 and the name bad.test.
    let a = egress(&[], &[&fake.addr(3), "bad.test"]);
    let under_a = [true, false, false, false];
    wait_for("a wired warm init", || rt.warm_inits_ready() >= 1);
    let first = start_warm(&rt, &a);
    assert_eq!(reach(&rt, &first, &fake, &host), under_a, "first under A");
    started.push(first);
    // The refill keeps an entry made for A: the next start under A takes it as it is.
    wait_for("an entry for A", || rt.warm_inits_with_policy() >= 1);
    let second = start_warm(&rt, &a);
    assert_eq!(reach(&rt, &second, &fake, &host), under_a, "second under A");
    started.push(second);

    // The workspace policy changes to B: only .3 is allowed. Entries made for A wait
    // in the pool; a start under B must not get A's rules.
    wait_for("an entry for A again", || rt.warm_inits_with_policy() >= 1);
    let b = egress(&[&format!("{}/32", fake.addr(3))], &[]);
    let under_b = [false, true, false, false];
    let third = start_warm(&rt, &b);
    assert_eq!(reach(&rt, &third, &fake, &host), under_b, "first under B");
    started.push(third);
    wait_for("an entry for B", || rt.warm_inits_with_policy() >= 1);
    let fourth = start_warm(&rt, &b);
    assert_eq!(reach(&rt, &fourth, &fake, &host), under_b, "second under B");
    started.push(fourth);

    // A sandbox without a policy never gets a policy's entry: it reaches .2, .3 and .4.
    wait_for("an entry for B again", || rt.warm_inits_with_policy() >= 1);
    wait_for("an open entry", || rt.warm_inits_ready() >= 1);
    let open = start_warm(&rt, &NetworkSpec::egress(vec![]));
    assert_eq!(
        reach(&rt, &open, &fake, &host),
        [true, true, true, false],
        "open"
    );
    started.push(open);

    for sb in &started {
        rt.destroy(sb).expect("destroy");
        assert_eq!(rt.sandbox_address(sb.id), None, "lease left behind");
    }
    rt.drain_warm_inits();
}

/// A policy that lets nothing through takes DNS too (a query to the resolvers reaches
/// whoever serves the name asked: a way out the policy means to close), on a wired warm
/// entry whose chain is rewritten to it as on one made for it; an open sandbox still
/// resolves.
#[test]
fn a_sandbox_whose_policy_lets_nothing_through_gets_no_dns() {
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (_cleanup, rt) = wired_runtime(&fake, dir.path());
    let resolver = |sb: &SandboxHandle| common::python_probe(sb, DNS_PROBE, &fake.addr(2), 53);
    let mut started = Vec::new();
    let deny_all = egress(&[], &["0.0.0.0/0"]);
    // What one layer allows, all denied by another.
    let allowed_then_denied = NetworkSpec::egress(vec![
        EgressPolicy {
            allow: vec![format!("{}/32", fake.addr(3)).parse().expect("rule")],
            deny: vec![],
        },
        EgressPolicy {
            allow: vec![],
            deny: vec![fake.addr(3).parse().expect("rule")],
        },
    ]);
    for (what, network) in [
        ("deny all, an open entry rewritten", &deny_all),
        ("deny all, an entry made for it", &deny_all),
        ("what is allowed, denied", &allowed_then_denied),
    ] {
        wait_for("a wired warm init", || rt.warm_inits_ready() >= 1);
        let sb = start_warm(&rt, network);
        let answer = resolver(&sb);
        started.push(sb);
        assert_eq!(answer, "silent", "{what}: the resolver answered");
    }
    // The resolver itself answers an open sandbox (the probe works), also on an entry
    // made for a policy that let nothing through and rewritten.
    wait_for("a wired warm init", || rt.warm_inits_ready() >= 1);
    let open = start_warm(&rt, &NetworkSpec::egress(vec![]));
    let answer = resolver(&open);
    started.push(open);
    assert_eq!(answer, "answered", "open");
    for sb in &started {
        rt.destroy(sb).expect("destroy");
    }
    rt.drain_warm_inits();
}
