//! Spare egress host sides: a sandbox with no policy of its own takes one made ahead of
//! time (lease, chain), gets the same egress-only network as a cold one, and neither its
//! destroy nor a drain leaves a link, chain, lease or marker behind; a warm init wired
//! ahead of time starts with its network done.

mod common;
mod fakenet;

use common::{runtime, wait_for, TestRuntime};
use fakenet::{FakeNet, PROBE};
use sandboxd_runtime::linux::{LinuxRuntime, NetConfig};
use sandboxd_runtime::{EgressPolicy, NetworkSpec, Runtime, SandboxHandle};
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};

const STATE: &str = "/run/sandboxd/net";

fn probe(handle: &SandboxHandle, host: &str, port: u16) -> String {
    common::python_probe(handle, PROBE, host, port)
}

/// The id a lease's link and chain are named after (its third field).
fn named_after(id: uuid::Uuid) -> Option<String> {
    let dir = std::path::Path::new(STATE);
    let text = sandboxd_runtime::linux::file_lock::with_dir_lock(dir, || {
        std::fs::read_to_string(dir.join("leases").join(id.to_string())).ok()
    })??;
    text.split_whitespace().nth(2).map(str::to_owned)
}

fn exists(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Markers of spares this process owns.
fn our_markers() -> usize {
    let me = format!("{} ", std::process::id());
    std::fs::read_dir(format!("{STATE}/spares"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                .filter(|t| t.starts_with(&me))
                .count()
        })
        .unwrap_or(0)
}

/// A runtime with one warm init (wired or not) resolving names through `fake`, and the
/// guard that cleans its data dir up.
fn egress_runtime(fake: &FakeNet, dir: &Path, wired: bool) -> (TestRuntime, LinuxRuntime) {
    let mut config = NetConfig::from_host();
    config.resolvers = vec![fake.addr(2).parse().expect("resolver")];
    let cleanup = runtime(dir);
    let rt = LinuxRuntime::with_network(common::raw_runtime(dir), config).with_warm_inits(1);
    rt.fill_warm_inits(0, wired);
    (cleanup, rt)
}

/// Egress and names work from `sb`; the host (a listener on all its addresses) does not.
fn assert_egress_only(rt: &LinuxRuntime, sb: &SandboxHandle, fake: &FakeNet, host: &TcpListener) {
    assert_eq!(
        probe(sb, &fake.addr(3), 8080),
        format!("ok {} hello", fake.addr(3))
    );
    assert_eq!(
        probe(sb, "good.test", 8080),
        format!("ok {} hello", fake.addr(2))
    );
    let addr = rt.sandbox_address(sb.id).expect("sandbox address");
    let gateway = Ipv4Addr::from(u32::from(addr) - 1).to_string();
    let port = host.local_addr().expect("port").port();
    assert!(
        probe(sb, &gateway, port).starts_with("err"),
        "the sandbox reaches the host"
    );
}

#[test]
fn a_sandbox_without_policy_takes_a_spare_and_keeps_egress_only() {
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (_cleanup, rt) = egress_runtime(&fake, dir.path(), false);
    wait_for("a spare network", || rt.spare_networks_ready() >= 1);
    let loopback = TcpListener::bind("127.0.0.1:0").expect("loopback listener");
    let any = TcpListener::bind("0.0.0.0:0").expect("host listener");

    let a = rt
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start from a spare");
    let spare = named_after(a.id).expect("a's lease");
    assert_ne!(
        spare,
        a.id.to_string(),
        "a took a spare, named after its own id"
    );
    // A sandbox with rules of its own gets its host side made for it.
    let deny = EgressPolicy {
        allow: vec![],
        deny: vec![fake.addr(3).parse().expect("deny")],
    };
    let b = rt
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![deny]))
        .expect("start with a policy");
    assert_eq!(named_after(b.id), Some(b.id.to_string()));

    assert_egress_only(&rt, &a, &fake, &any);
    let port = loopback.local_addr().expect("port").port();
    assert!(probe(&a, "127.0.0.1", port).starts_with("err"));
    assert!(
        probe(&b, &fake.addr(3), 8080).starts_with("err"),
        "b's deny"
    );
    assert_eq!(
        probe(&b, &fake.addr(2), 8080),
        format!("ok {} hello", fake.addr(2))
    );

    let spare_key = &uuid::Uuid::parse_str(&spare)
        .expect("uuid")
        .simple()
        .to_string()[..12];
    for handle in [&a, &b] {
        rt.destroy(handle).expect("destroy");
        assert_eq!(rt.sandbox_address(handle.id), None, "lease left behind");
    }
    assert!(
        !exists(&["ip", "link", "show", &format!("sbx{spare_key}")]),
        "veth left"
    );
    assert!(
        !Command::new("nft")
            .args(["list", "table", "inet", "sandboxd"])
            .output()
            .is_ok_and(
                |o| String::from_utf8_lossy(&o.stdout).contains(&format!("\"sbx{spare_key}\""))
            ),
        "nft entries left"
    );
    rt.drain_warm_inits();
    assert_eq!(rt.spare_networks_ready(), 0);
    assert_eq!(our_markers(), 0, "spare markers left");
}

/// Whether the host end of the network named after `id` exists.
fn link_exists(id: &str) -> bool {
    let key = &uuid::Uuid::parse_str(id)
        .expect("uuid")
        .simple()
        .to_string()[..12];
    exists(&["ip", "link", "show", &format!("sbx{key}")])
}

#[test]
fn a_wired_warm_init_starts_with_its_network_done() {
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (_cleanup, rt) = egress_runtime(&fake, dir.path(), true);
    wait_for("a wired warm init", || rt.warm_inits_ready() >= 1);
    let any = TcpListener::bind("0.0.0.0:0").expect("host listener");

    let a = rt
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start from a wired warm init");
    assert!(
        a.state_dir.join("owner").exists(),
        "a took the warm entry (its dir, renamed)"
    );
    let wire = named_after(a.id).expect("a's lease");
    assert_ne!(wire, a.id.to_string(), "named after the warm entry");
    assert!(link_exists(&wire), "a's host end");
    assert_egress_only(&rt, &a, &fake, &any);
    // The staged resolv.conf is the sandbox root's, in an /etc still the image's.
    assert_eq!(
        common::sh_ok(
            &a,
            "stat -c '%u %g %a' /etc/resolv.conf /etc; ls /etc/passwd"
        ),
        "0 0 644\n0 0 755\n/etc/passwd\n"
    );
    assert!(common::sh_ok(&a, "cat /etc/resolv.conf").contains(&fake.addr(2)));

    // A sandbox with only lo, from the same runtime, starts cold without a link.
    let b = rt
        .start(&common::spec("default"))
        .expect("start with lo only");
    assert!(!b.state_dir.join("owner").exists(), "b started cold");
    assert_eq!(common::sh_ok(&b, "ls /sys/class/net").trim(), "lo");

    for handle in [&a, &b] {
        rt.destroy(handle).expect("destroy");
        assert_eq!(rt.sandbox_address(handle.id), None, "lease left behind");
    }
    assert!(!link_exists(&wire), "veth left");
    // The refilled entry is wired too; draining removes its network and marker.
    wait_for("a refill", || rt.warm_inits_ready() >= 1);
    rt.drain_warm_inits();
    assert_eq!(our_markers(), 0, "markers left");
    let ours = |id: &str| named_after(uuid::Uuid::parse_str(id).expect("uuid"));
    assert_eq!(ours(&wire), None);
}
