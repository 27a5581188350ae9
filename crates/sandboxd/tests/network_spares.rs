//! Spare egress host sides: a sandbox with no policy of its own takes one made ahead of
//! time (lease, chain), gets the same egress-only network as a cold one, and neither its
//! destroy nor a drain leaves a link, chain, lease or marker behind.

mod common;
mod fakenet;

use common::runtime;
use fakenet::{FakeNet, PROBE};
use sandboxd_runtime::linux::{LinuxRuntime, NetConfig};
use sandboxd_runtime::{EgressPolicy, NetworkSpec, Runtime, SandboxHandle};
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const STATE: &str = "/run/sandboxd/net";

fn probe(handle: &SandboxHandle, host: &str, port: u16) -> String {
    common::python_probe(handle, PROBE, host, port)
}

/// The id a lease's link and chain are named after (its third field).
fn named_after(id: uuid::Uuid) -> Option<String> {
    let text = std::fs::read_to_string(format!("{STATE}/leases/{id}")).ok()?;
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

#[test]
fn a_sandbox_without_policy_takes_a_spare_and_keeps_egress_only() {
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = NetConfig::from_host();
    config.resolvers = vec![fake.addr(2).parse().expect("resolver")];
    let _cleanup = runtime(dir.path());
    let rt = LinuxRuntime::with_network(common::raw_runtime(dir.path()), config).with_warm_inits(1);
    rt.fill_warm_inits(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while rt.spare_networks_ready() < 1 {
        assert!(Instant::now() < deadline, "no spare network made");
        std::thread::sleep(Duration::from_millis(20));
    }
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

    let a_addr = rt.sandbox_address(a.id).expect("a address");
    let gateway = Ipv4Addr::from(u32::from(a_addr) - 1).to_string();
    assert_eq!(
        probe(&a, &fake.addr(3), 8080),
        format!("ok {} hello", fake.addr(3))
    );
    assert_eq!(
        probe(&a, "good.test", 8080),
        format!("ok {} hello", fake.addr(2))
    );
    let port = loopback.local_addr().expect("port").port();
    assert!(probe(&a, "127.0.0.1", port).starts_with("err"));
    let port = any.local_addr().expect("port").port();
    assert!(
        probe(&a, &gateway, port).starts_with("err"),
        "a reaches the host"
    );
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
        !exists(&[
            "nft",
            "list",
            "chain",
            "inet",
            "sandboxd",
            &format!("sb_{spare_key}")
        ]),
        "chain left"
    );
    rt.drain_warm_inits();
    assert_eq!(rt.spare_networks_ready(), 0);
    assert_eq!(our_markers(), 0, "spare markers left");
}
