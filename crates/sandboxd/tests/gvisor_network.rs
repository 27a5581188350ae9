//! Egress networking on the gVisor tier: the container tier's veth, pool and nftables
//! policy, with gVisor's own network stack inside the sandbox's network namespace.
//! Against the fake "internet" host of `fakenet` (a network namespace this test makes);
//! no traffic leaves the machine. Skipped where runsc is missing.

mod common;
mod fakenet;

use common::agent_sh;
use fakenet::{link_exists, FakeNet, PROBE};
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use sandboxd_runtime::linux::{LinuxConfig, NetConfig};
use sandboxd_runtime::{EgressPolicy, NetworkSpec, Runtime, SandboxHandle};
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Stdio};

/// The tier with egress, destroying what a failed test left (network included) and
/// its cgroup parent when dropped.
struct Gvisor(GvisorRuntime);

impl Drop for Gvisor {
    fn drop(&mut self) {
        for handle in self.0.stored_handles() {
            let _ = self.0.destroy(&handle);
        }
        self.0.cgroups().remove_parent_if_unused();
    }
}

fn gvisor(data_dir: &std::path::Path, net: NetConfig) -> Option<Gvisor> {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return None;
    }
    let rt = GvisorRuntime::new(LinuxConfig {
        data_dir: data_dir.to_path_buf(),
        init_exe: env!("CARGO_BIN_EXE_sandboxd").into(),
        init_args: vec!["__sandbox-init".into()],
        cgroup_parent: common::own_cgroups::parent_for(data_dir),
        max_ptys_per_sandbox: sandboxd_runtime::linux::DEFAULT_MAX_PTYS,
    })
    .expect("gvisor runtime");
    Some(Gvisor(rt.with_network(net)))
}

fn probe(handle: &SandboxHandle, host: &str, port: u16) -> String {
    common::python_probe(handle, PROBE, host, port)
}

fn policy(allow: &[&str], deny: &[&str]) -> EgressPolicy {
    let rules = |l: &[&str]| l.iter().map(|r| r.parse().expect("rule")).collect();
    EgressPolicy {
        allow: rules(allow),
        deny: rules(deny),
    }
}

/// Whether the shared table holds entries (set elements) of sandbox `id`'s interface.
fn nft_has_entries(id: uuid::Uuid) -> bool {
    let ifname = format!("\"sbx{}\"", &id.simple().to_string()[..12]);
    Command::new("nft")
        .args(["list", "table", "inet", "sandboxd"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&ifname))
}

#[test]
fn gvisor_egress_reaches_the_fake_internet_under_policy_and_nothing_else() {
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = NetConfig::from_host();
    config.resolvers = vec![fake.addr(2).parse().expect("resolver")];
    let Some(rt) = gvisor(dir.path(), config) else {
        return;
    };
    let loopback = TcpListener::bind("127.0.0.1:0").expect("loopback listener");
    let any = TcpListener::bind("0.0.0.0:0").expect("host listener");

    // As on the container tier: the workspace layer allows the fake host's /29 and
    // denies bad.test; the sandbox layer denies .3.
    let layers = vec![
        policy(&[&format!("{}.0/29", fake.prefix)], &["bad.test"]),
        policy(&[], &[&fake.addr(3)]),
    ];
    let a =
        rt.0.start_with_network(&common::spec("default"), &NetworkSpec::egress(layers))
            .expect("start a");
    let a_addr = rt.0.sandbox_address(a.id).expect("a address");
    let gateway = Ipv4Addr::from(u32::from(a_addr) - 1).to_string();

    // gVisor's stack owns the address: the sandbox sees it on its eth0.
    let (code, out) = agent_sh(&a, "cat /proc/net/dev");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("eth0"), "no eth0 under gVisor: {out}");
    // ...and the host kernel's stack in that namespace keeps none (netstack took it).
    let host_view = Command::new("nsenter")
        .arg(format!("--net={}", a.state_dir.join("netns").display()))
        .args(["ip", "-4", "-o", "addr", "show", "eth0"])
        .output()
        .expect("nsenter");
    let host_view = String::from_utf8_lossy(&host_view.stdout);
    assert!(
        !host_view.contains(&a_addr.to_string()),
        "the host stack still holds the address: {host_view}"
    );

    let results = [
        ("fake host by address", probe(&a, &fake.addr(2), 8080)),
        ("fake host by name (UDP DNS)", probe(&a, "good.test", 8080)),
        ("denied CIDR", probe(&a, &fake.addr(3), 8080)),
        ("denied domain", probe(&a, "bad.test", 8080)),
        (
            "host loopback API",
            probe(&a, "127.0.0.1", loopback.local_addr().expect("port").port()),
        ),
        (
            "host via gateway",
            probe(&a, &gateway, any.local_addr().expect("port").port()),
        ),
        (
            "host via its fake-net address",
            probe(&a, &fake.addr(1), any.local_addr().expect("port").port()),
        ),
    ];
    let ok = |host: u8| format!("ok {} hello", fake.addr(host));
    assert_eq!(results[0].1, ok(2), "{results:?}");
    assert_eq!(results[1].1, ok(2), "{results:?}");
    assert!(results[2].1.starts_with("err"), "{results:?}");
    assert!(
        results[3].1.starts_with(&format!("err {}", fake.addr(4))),
        "bad.test resolves but must not connect: {results:?}"
    );
    for (what, got) in &results[4..7] {
        assert!(got.starts_with("err"), "{what} reachable: {got}");
    }

    // Without policy layers of its own, b reaches .3 (a's policy is a's only).
    let b =
        rt.0.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
            .expect("start b");
    assert_eq!(probe(&b, &fake.addr(3), 8080), ok(3));
    let b_addr = rt.0.sandbox_address(b.id).expect("b address").to_string();
    assert!(
        fake.probe(&b_addr, 8080).starts_with("err"),
        "the outside connects into b"
    );

    for handle in [&a, &b] {
        rt.0.destroy(handle).expect("destroy");
        assert!(!link_exists(&handle.id.to_string()), "veth left behind");
        assert!(!nft_has_entries(handle.id), "nft entries left behind");
        assert_eq!(rt.0.sandbox_address(handle.id), None, "lease left behind");
        assert_eq!(
            common::mounts_under(&handle.state_dir),
            Vec::<String>::new(),
            "netns mount left behind"
        );
    }
}

#[test]
fn gvisor_network_none_has_only_loopback() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(dir.path(), NetConfig::from_host()) else {
        return;
    };
    let handle =
        rt.0.start_with_network(&common::spec("default"), &NetworkSpec::none())
            .expect("start");
    assert_eq!(rt.0.sandbox_address(handle.id), None);
    let (code, out) = agent_sh(&handle, "cat /proc/net/dev");
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("eth0"), "an interface without egress: {out}");
    rt.0.destroy(&handle).expect("destroy");
}

/// A destroy that fails on the files (a mount it does not know of under the state dir)
/// still removes the network: no lease, chain or link stays until a reconcile.
#[test]
fn a_destroy_failing_on_a_mount_still_removes_the_network() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(dir.path(), NetConfig::from_host()) else {
        return;
    };
    let handle =
        rt.0.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
            .expect("start");
    assert!(rt.0.sandbox_address(handle.id).is_some(), "no lease");
    let extra = handle.state_dir.join("extra");
    std::fs::create_dir(&extra).expect("mount point");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&extra)
        .status()
        .expect("mount");
    assert!(mounted.success());
    let failed = rt.0.destroy(&handle);
    let unmounted = Command::new("umount").arg(&extra).status().expect("umount");
    assert!(unmounted.success());
    assert!(
        failed.is_err(),
        "destroy ignored a mount under the state dir"
    );
    assert!(!link_exists(&handle.id.to_string()), "veth left behind");
    assert!(!nft_has_entries(handle.id), "nft entries left behind");
    assert_eq!(rt.0.sandbox_address(handle.id), None, "lease left behind");
    rt.0.destroy(&handle).expect("destroy again");
    assert_eq!(
        common::mounts_under(&handle.state_dir),
        Vec::<String>::new()
    );
}

/// A fork's network is the one its start asks for, whatever its source had: a clone of
/// an egress sandbox started without network has only loopback, and a clone of a
/// sandbox without network started with egress reaches the fake host from its own
/// address (the memory image holds no link; the restore takes the namespace's).
#[test]
fn a_fork_gets_the_network_its_start_asks_for_not_its_sources() {
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = NetConfig::from_host();
    config.resolvers = vec![fake.addr(2).parse().expect("resolver")];
    let Some(rt) = gvisor(dir.path(), config) else {
        return;
    };
    let fork = |source: SandboxHandle, network: &NetworkSpec| {
        let (snapshot, source) = rt.0.snapshot_memory(&source, uuid::Uuid::new_v4());
        let snapshot = snapshot.expect("memory snapshot");
        let mut spec = common::spec("default");
        spec.extra_layers = vec![snapshot.layer.digest.clone()];
        let clone =
            rt.0.start_from_memory(&spec, network, &snapshot.image)
                .expect("fork");
        (source, clone, snapshot)
    };
    let with_egress =
        rt.0.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
            .expect("start");
    let (a, a_clone, a_snap) = fork(with_egress, &NetworkSpec::none());
    assert_eq!(
        rt.0.sandbox_address(a_clone.id),
        None,
        "a lease for no network"
    );
    assert!(!link_exists(&a_clone.id.to_string()));
    let (code, out) = agent_sh(&a_clone, "cat /proc/net/dev");
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("eth0"), "an interface without egress: {out}");
    assert!(probe(&a_clone, &fake.addr(2), 8080).starts_with("err"));

    let without = rt.0.start(&common::spec("default")).expect("start");
    let (b, b_clone, b_snap) = fork(without, &NetworkSpec::egress(vec![]));
    let addr = rt.0.sandbox_address(b_clone.id).expect("the fork's lease");
    assert_eq!(
        common::python_probe(&b_clone, fakenet::LOCAL_PROBE, &fake.addr(2), 8080),
        format!("ok {addr} hello")
    );

    for handle in [&a, &a_clone, &b, &b_clone] {
        rt.0.destroy(handle).expect("destroy");
        assert!(!link_exists(&handle.id.to_string()), "veth left behind");
        assert!(!nft_has_entries(handle.id), "nft entries left behind");
        assert_eq!(rt.0.sandbox_address(handle.id), None, "lease left behind");
    }
    for snapshot in [a_snap, b_snap] {
        rt.0.delete_memory_snapshot(&snapshot.image)
            .expect("delete the image");
        rt.0.delete_layer(&snapshot.layer.digest)
            .expect("delete the layer");
    }
}

/// A sandbox with egress destroyed while it is on disk leaves nothing: its lease, link,
/// entries and netns mount go with its image. (The engine puts one on disk only with a
/// runsc that has `--net-disconnect-ok`: see `can_checkpoint`; the runtime can with any,
/// for one without TCP connections, as here.)
#[test]
fn an_egress_sandbox_destroyed_on_disk_leaves_no_network_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(dir.path(), NetConfig::from_host()) else {
        return;
    };
    let handle =
        rt.0.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
            .expect("start");
    assert_eq!(
        rt.0.can_checkpoint(&handle),
        rt.0.runsc_features().net_disconnect_ok,
        "an egress sandbox is offered for pausing to disk exactly when runsc can reset \
         its connections"
    );
    let on_disk = rt.0.checkpoint(&handle).expect("pause to disk");
    assert!(rt.0.is_checkpointed(&on_disk));
    assert!(
        rt.0.sandbox_address(on_disk.id).is_some(),
        "the lease went at the pause"
    );
    rt.0.destroy(&on_disk).expect("destroy");
    assert!(!link_exists(&on_disk.id.to_string()), "veth left behind");
    assert!(!nft_has_entries(on_disk.id), "nft entries left behind");
    assert_eq!(rt.0.sandbox_address(on_disk.id), None, "lease left behind");
    assert!(!on_disk.state_dir.exists(), "state dir left behind");
    assert_eq!(common::mounts_under(dir.path()), Vec::<String>::new());
}
