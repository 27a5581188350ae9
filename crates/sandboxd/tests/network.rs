//! Egress networking of the Linux backend against a fake "internet" host (see
//! `fakenet`) in a network namespace this test makes; no traffic leaves the machine.

mod common;
mod fakenet;

use common::{agent_sh, runtime, tracked_from};
use fakenet::{FakeNet, DNS_PROBE, PROBE};
use sandboxd_runtime::linux::{LinuxRuntime, NetConfig};
use sandboxd_runtime::{EgressPolicy, NetworkSpec, Runtime, SandboxHandle};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Destroys (network included) every sandbox still on disk, e.g. after a failed assertion.
struct DestroyOnDrop<'a>(&'a LinuxRuntime);

impl Drop for DestroyOnDrop<'_> {
    fn drop(&mut self) {
        for handle in self.0.stored_handles() {
            let _ = self.0.destroy(&handle);
        }
    }
}

/// A runtime on `data` (kept to destroy what is left) and one with egress networking
/// whose resolver is the fake host's.
fn fake_net_runtime(fake: &FakeNet, data: &std::path::Path) -> (common::TestRuntime, LinuxRuntime) {
    let mut config = NetConfig::from_host();
    config.resolvers = vec![fake.addr(2).parse().expect("resolver")];
    let cleanup = runtime(data);
    let net_rt = LinuxRuntime::with_network(common::raw_runtime(data), config);
    (cleanup, net_rt)
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

fn link_exists(id: uuid::Uuid) -> bool {
    let name = format!("sbx{}", &id.simple().to_string()[..12]);
    Command::new("ip")
        .args(["link", "show", &name])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[test]
fn egress_reaches_the_fake_internet_under_policy_and_nothing_else() {
    let forward_before =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("ip_forward");
    // Another test's sandbox may hold ip_forward at 1 right now (sandboxd set it and left
    // its marker): then the value to come back to is 0, the host's own.
    let marker = std::path::Path::new("/run/sandboxd/net/forward-enabled");
    let forward_before = match marker.exists() {
        true => "0\n".to_string(),
        false => forward_before,
    };
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    // `_cleanup` destroys whatever a failed assertion leaves running when dropped.
    let (_cleanup, net_rt) = fake_net_runtime(&fake, dir.path());
    let _net_cleanup = DestroyOnDrop(&net_rt);
    let loopback = TcpListener::bind("127.0.0.1:0").expect("loopback listener");
    let any = TcpListener::bind("0.0.0.0:0").expect("host listener");

    // Workspace layer allows only the fake host's /29 and denies bad.test; the sandbox
    // layer narrows it further by denying .3.
    let layers = vec![
        policy(&[&format!("{}.0/29", fake.prefix)], &["bad.test"]),
        policy(&[], &[&fake.addr(3)]),
    ];
    let a = net_rt
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(layers))
        .expect("start a");
    let b = net_rt
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start b");
    let a_addr = net_rt.sandbox_address(a.id).expect("a address");
    let b_addr = net_rt.sandbox_address(b.id).expect("b address").to_string();
    let gateway = Ipv4Addr::from(u32::from(a_addr) - 1).to_string();

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
    assert_eq!(
        results[0].1,
        format!("ok {} hello", fake.addr(2)),
        "{results:?}"
    );
    assert_eq!(
        results[1].1,
        format!("ok {} hello", fake.addr(2)),
        "{results:?}"
    );
    assert!(results[2].1.starts_with("err"), "{results:?}");
    assert!(
        results[3].1.starts_with(&format!("err {}", fake.addr(4))),
        "bad.test resolves but must not connect: {results:?}"
    );
    for (what, got) in &results[4..7] {
        assert!(got.starts_with("err"), "{what} reachable: {got}");
    }
    // The policy was a's only: b reaches .3.
    assert_eq!(
        probe(&b, &fake.addr(3), 8080),
        format!("ok {} hello", fake.addr(3))
    );

    // A listener inside b: reachable from b itself, not from a, the fake host or the host.
    let (code, out) = agent_sh(&b, "/usr/bin/python3 -c 'import socket,time\ns=socket.socket();s.bind((\"0.0.0.0\",9000));s.listen(8)\nwhile True: c,_=s.accept();c.sendall(b\"b\");c.close()' >/dev/null 2>&1 </dev/null & for i in $(seq 100); do python3 -c 'import socket;socket.create_connection((\"127.0.0.1\",9000))' 2>/dev/null && exit 0; sleep 0.1; done; exit 1");
    assert_eq!(code, Some(0), "b's listener: {out}");
    assert_eq!(probe(&b, &b_addr, 9000), format!("ok {b_addr} b"));
    assert!(probe(&a, &b_addr, 9000).starts_with("err"), "a reaches b");
    assert!(
        fake.probe(&b_addr, 9000).starts_with("err"),
        "the outside connects into b"
    );
    let target: SocketAddr = format!("{b_addr}:9000").parse().expect("addr");
    assert!(
        TcpStream::connect_timeout(&target, Duration::from_secs(3)).is_err(),
        "the host connects into b"
    );

    for handle in [&a, &b] {
        net_rt.destroy(handle).expect("destroy");
        assert!(!link_exists(handle.id), "veth left behind");
        assert!(!nft_has_entries(handle.id), "nft entries left behind");
        assert_eq!(net_rt.sandbox_address(handle.id), None, "lease left behind");
    }
    let leases_left = std::fs::read_dir("/run/sandboxd/net/leases")
        .map(|d| d.count())
        .unwrap_or(0);
    if leases_left == 0 {
        let forward_after =
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("ip_forward");
        assert_eq!(forward_after, forward_before, "ip_forward not restored");
        assert!(!marker.exists(), "sandboxd's ip_forward marker left behind");
    }
}

#[test]
fn network_none_has_only_loopback() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = runtime(dir.path());
    let net_rt =
        LinuxRuntime::with_network(common::raw_runtime(dir.path()), NetConfig::from_host());
    let _net_cleanup = DestroyOnDrop(&net_rt);
    let handle = net_rt
        .start_with_network(&common::spec("default"), &NetworkSpec::none())
        .expect("start");
    let (code, out) = agent_sh(&handle, "ls /sys/class/net");
    assert_eq!((code, out.trim()), (Some(0), "lo"));
    assert_eq!(net_rt.sandbox_address(handle.id), None);
    net_rt.destroy(&handle).expect("destroy");
}

/// A sandbox's tracked connections (and their NAT mappings) go with its network: the
/// next sandbox given its address must not receive what the far end still sends to the
/// last one. Before, they stayed for as long as the kernel's timeouts (days for TCP).
#[test]
fn a_destroyed_sandboxs_tracked_connections_are_forgotten() {
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    // `_cleanup` destroys whatever a failed assertion leaves running when dropped.
    let (_cleanup, net_rt) = fake_net_runtime(&fake, dir.path());
    let _net_cleanup = DestroyOnDrop(&net_rt);
    let sb = net_rt
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start");
    let addr = net_rt.sandbox_address(sb.id).expect("address");
    // A TCP flow to the fake host, found by name (a UDP flow to the resolver first).
    assert_eq!(
        probe(&sb, "good.test", 8080),
        format!("ok {} hello", fake.addr(2))
    );
    let before = tracked_from(addr);
    assert!(!before.is_empty(), "the probe's flows are not tracked");
    net_rt.destroy(&sb).expect("destroy");
    assert_eq!(
        tracked_from(addr),
        Vec::<String>::new(),
        "tracked after destroy"
    );
}

/// The IPv6 settings (`disable_ipv6`) of this namespace's interfaces, `all` and
/// `default` included, sandboxes' host ends left out.
fn host_ipv6_settings() -> Vec<(String, String)> {
    let names: Vec<String> = std::fs::read_dir("/proc/sys/net/ipv6/conf")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                // Other tests' host ends turn their own off as they come up.
                .filter(|name| !name.starts_with("sbx"))
                .collect()
        })
        .unwrap_or_default();
    let mut all: Vec<(String, String)> = names
        .into_iter()
        .map(|name| {
            let path = format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6");
            (name, std::fs::read_to_string(path).unwrap_or_default())
        })
        .collect();
    all.sort();
    all
}

/// The host end of sandbox `sb`'s link: the host interface whose index its `eth0`'s
/// peer link names.
fn host_end_of(sb: &SandboxHandle) -> String {
    let (code, iflink) = agent_sh(sb, "cat /sys/class/net/eth0/iflink");
    assert_eq!(code, Some(0), "eth0's peer: {iflink}");
    let index = iflink.trim();
    std::fs::read_dir("/sys/class/net")
        .expect("the host's interfaces")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|name| {
            name.starts_with("sbx")
                && std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
                    .is_ok_and(|i| i.trim() == index)
        })
        .unwrap_or_else(|| panic!("no host interface with index {index}"))
}

/// The IPv6 packets interface `name` sent, by counter (the kernel keeps them with
/// IPv6 off too); none on a kernel without IPv6, every one of them otherwise.
fn ipv6_sent(name: &str) -> Vec<(String, u64)> {
    const SENT: [&str; 3] = ["Ip6OutRequests", "Ip6OutMcastPkts", "Icmp6OutMsgs"];
    if !std::path::Path::new("/proc/net/dev_snmp6").exists() {
        return Vec::new();
    }
    let counters = std::fs::read_to_string(format!("/proc/net/dev_snmp6/{name}"))
        .expect("the host end's IPv6 counters");
    let found: Vec<(String, u64)> = counters
        .lines()
        .filter_map(|l| {
            let (counter, value) = l.split_once(char::is_whitespace)?;
            SENT.contains(&counter)
                .then(|| (counter.to_owned(), value.trim().parse().unwrap_or(u64::MAX)))
        })
        .collect();
    assert_eq!(
        found.len(),
        SENT.len(),
        "the counters of {name}: {counters}"
    );
    found
}

/// A sandbox that sends nothing leaves nothing its network's teardown must look for in
/// the host's connection tracking (that look walks the host's whole table: ~12 ms of
/// system time here): its `eth0` has IPv6 off, so the host end of its link receives no
/// packet until a process in it sends one. Before, `eth0` sent a dozen neighbour
/// discovery and multicast listener packets of its own as it came up. Nor does the
/// host end send it any IPv6: its IPv6 is off too (with it on, it got a link-local
/// address and route, and sent duplicate address detection, router solicitation and
/// multicast listener packets into the sandbox). The host's own interfaces keep their
/// IPv6 setting (the sandbox's is set from a thread in its namespace, by name: `eth0`
/// is a host interface's name too).
#[test]
fn an_idle_sandboxs_link_carries_nothing_either_way_and_has_no_ipv6() {
    let host_before = host_ipv6_settings();
    let dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = runtime(dir.path());
    let net_rt =
        LinuxRuntime::with_network(common::raw_runtime(dir.path()), NetConfig::from_host());
    let _net_cleanup = DestroyOnDrop(&net_rt);
    let sb = net_rt
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start");
    // Found through eth0's peer: a network a concurrent one-shot run parked, taken over,
    // keeps that run's name.
    let host_end = host_end_of(&sb);
    // Duplicate address detection and router solicitation run for about a second.
    std::thread::sleep(Duration::from_millis(1500));
    let received =
        std::fs::read_to_string(format!("/sys/class/net/{host_end}/statistics/rx_packets"))
            .expect("the host end's counter");
    let (code, inet6) = agent_sh(&sb, "cat /proc/net/if_inet6");
    assert_eq!(code, Some(0));
    assert!(
        !inet6.contains("eth0") && inet6.contains("lo"),
        "eth0 has IPv6 addresses, or lo has none: {inet6}"
    );
    assert_eq!(received.trim(), "0", "the idle sandbox sent packets");
    for (counter, value) in ipv6_sent(&host_end) {
        assert_eq!(
            value, 0,
            "the host end sent IPv6 into the idle sandbox ({counter})"
        );
    }
    let host_inet6 = std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default();
    assert!(
        !host_inet6.contains(&host_end),
        "the host end has IPv6 addresses: {host_inet6}"
    );
    // (Other tests' links come and go meanwhile: those present both times are compared.)
    let host_after = host_ipv6_settings();
    let changed: Vec<_> = host_before
        .iter()
        .filter(|(name, value)| {
            host_after
                .iter()
                .any(|(after, now)| after == name && now != value)
        })
        .collect();
    assert!(
        changed.is_empty(),
        "the host's IPv6 settings changed: {changed:?}"
    );
    net_rt.destroy(&sb).expect("destroy");
}

/// A cold start under a policy that lets nothing through gets no DNS (see
/// `network_warm_policy` for warm entries), and no DNS entry in the shared table.
#[test]
fn a_cold_sandbox_whose_policy_lets_nothing_through_gets_no_dns() {
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (_cleanup, net_rt) = fake_net_runtime(&fake, dir.path());
    let _net_cleanup = DestroyOnDrop(&net_rt);
    let sb = net_rt
        .start_with_network(
            &common::spec("default"),
            &NetworkSpec::egress(vec![policy(&[], &["0.0.0.0/0"])]),
        )
        .expect("start");
    assert!(!sb.state_dir.join("owner").exists(), "not a cold start");
    let answer = common::python_probe(&sb, DNS_PROBE, &fake.addr(2), 53);
    // The probe and the resolver work: an open sandbox beside it is answered.
    let open = net_rt
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start an open sandbox");
    let open_answer = common::python_probe(&open, DNS_PROBE, &fake.addr(2), 53);
    net_rt.destroy(&open).expect("destroy the open sandbox");
    assert_eq!(open_answer, "answered", "an open sandbox got no answer");
    let listed = Command::new("nft")
        .args(["list", "set", "inet", "sandboxd", "dns"])
        .output()
        .expect("nft");
    let ifname = format!("\"sbx{}\"", &sb.id.simple().to_string()[..12]);
    let dns_entry = String::from_utf8_lossy(&listed.stdout).contains(&ifname);
    net_rt.destroy(&sb).expect("destroy");
    assert_eq!(answer, "silent", "the resolver answered");
    assert!(!dns_entry, "the sandbox has a DNS entry");
}
