//! Egress networking against a fake "internet" host in a network namespace this test
//! makes (198.18.R.0/29, a benchmarking range); no traffic leaves the machine.

mod common;

use common::{agent_sh, runtime};
use sandboxd_runtime::linux::{LinuxRuntime, NetConfig};
use sandboxd_runtime::{EgressPolicy, NetworkSpec, Runtime, SandboxHandle};
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A TCP service on :8080 answering "hello", and DNS on :53 (good.test → .2,
/// bad.test → .4, anything else NXDOMAIN), at .2, .3 and .4 of the fake host.
const FAKE_HOST: &str = r#"
import socket, struct, sys, threading
pre = sys.argv[1]
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); t.bind(("0.0.0.0", 8080)); t.listen(64)
def serve():
    while True:
        c, _ = t.accept(); c.sendall(b"hello"); c.close()
threading.Thread(target=serve, daemon=True).start()
names = {b"good.test": pre + ".2", b"bad.test": pre + ".4"}
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 53))
print("ready", flush=True)
while True:
    q, a = u.recvfrom(512)
    i, labels = 12, []
    while q[i]:
        labels.append(q[i + 1:i + 1 + q[i]]); i += 1 + q[i]
    qtype, end = struct.unpack(">H", q[i + 1:i + 3])[0], i + 5
    ip = names.get(b".".join(labels).lower())
    if ip and qtype == 1:
        r = q[:2] + b"\x81\x80" + q[4:6] + b"\x00\x01\x00\x00\x00\x00" + q[12:end] + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + socket.inet_aton(ip)
    else:
        r = q[:2] + bytes([0x81, 0x80 if ip else 0x83]) + q[4:6] + b"\x00\x00\x00\x00\x00\x00" + q[12:end]
    u.sendto(r, a)
"#;

/// Prints "ok <data>" or "err <exception>" for a TCP connect from inside a sandbox.
const PROBE: &str = r#"
import socket, sys
try:
    host = socket.gethostbyname(sys.argv[1])
except Exception as e:
    print("noname", type(e).__name__); sys.exit(0)
try:
    s = socket.create_connection((host, int(sys.argv[2])), timeout=3); print("ok", host, s.recv(64).decode())
except Exception as e:
    print("err", host, type(e).__name__)
"#;

fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("spawn");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The fake outside host: its namespace, the host's veth to it, and its server.
struct FakeNet {
    ns: String,
    veth: String,
    prefix: String,
    server: Child,
}

impl FakeNet {
    fn new() -> FakeNet {
        let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let r = u8::from_str_radix(&tag[..2], 16).expect("hex");
        let (ns, veth, prefix) = (format!("sbxtest-{tag}"), format!("sbt{tag}"), format!("198.18.{r}"));
        run(&["ip", "netns", "add", &ns]);
        let mut fake = FakeNet { ns: ns.clone(), veth: veth.clone(), prefix: prefix.clone(), server: Command::new("true").spawn().expect("true") };
        run(&["ip", "link", "add", &veth, "type", "veth", "peer", "name", "fake0", "netns", &ns]);
        run(&["ip", "addr", "add", &format!("{prefix}.1/29"), "dev", &veth]);
        run(&["ip", "link", "set", &veth, "up"]);
        for host in [2, 3, 4] {
            run(&["ip", "-n", &ns, "addr", "add", &format!("{prefix}.{host}/29"), "dev", "fake0"]);
        }
        run(&["ip", "-n", &ns, "link", "set", "fake0", "up"]);
        run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        // So that connecting into a sandbox from here is a real attempt, not "no route".
        run(&["ip", "-n", &ns, "route", "add", "10.213.0.0/16", "via", &format!("{prefix}.1")]);
        let _ = fake.server.wait();
        fake.server = Command::new("ip")
            .args(["netns", "exec", &ns, "/usr/bin/python3", "-c", FAKE_HOST, &prefix])
            .stdout(Stdio::piped())
            .spawn()
            .expect("fake host server");
        let mut line = String::new();
        BufReader::new(fake.server.stdout.take().expect("stdout")).read_line(&mut line).expect("ready line");
        assert_eq!(line.trim(), "ready");
        fake
    }

    fn addr(&self, host: u8) -> String {
        format!("{}.{host}", self.prefix)
    }

    /// Runs the probe from the fake host's namespace.
    fn probe(&self, host: &str, port: u16) -> String {
        let out = Command::new("ip").args(["netns", "exec", &self.ns, "/usr/bin/python3", "-c", PROBE, host, &port.to_string()]).output().expect("probe");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for FakeNet {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip").args(["link", "del", &self.veth]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// Destroys (network included) every sandbox still on disk, e.g. after a failed assertion.
struct DestroyOnDrop<'a>(&'a LinuxRuntime);

impl Drop for DestroyOnDrop<'_> {
    fn drop(&mut self) {
        for handle in self.0.stored_handles() {
            let _ = self.0.destroy(&handle);
        }
    }
}

fn probe(handle: &SandboxHandle, host: &str, port: u16) -> String {
    let script = format!("exec /usr/bin/python3 -c '{}' {host} {port}", PROBE.replace('\'', "'\\''"));
    let (code, out) = agent_sh(handle, &script);
    assert_eq!(code, Some(0), "probe failed: {out}");
    out.trim().to_string()
}

fn policy(allow: &[&str], deny: &[&str]) -> EgressPolicy {
    let rules = |l: &[&str]| l.iter().map(|r| r.parse().expect("rule")).collect();
    EgressPolicy { allow: rules(allow), deny: rules(deny) }
}

fn nft_has_chain(id: uuid::Uuid) -> bool {
    let chain = format!("sb_{}", &id.simple().to_string()[..12]);
    Command::new("nft").args(["list", "chain", "inet", "sandboxd", &chain]).stderr(Stdio::null()).stdout(Stdio::null()).status().map(|s| s.success()).unwrap_or(false)
}

fn link_exists(id: uuid::Uuid) -> bool {
    let name = format!("sbx{}", &id.simple().to_string()[..12]);
    Command::new("ip").args(["link", "show", &name]).stderr(Stdio::null()).stdout(Stdio::null()).status().map(|s| s.success()).unwrap_or(false)
}

#[test]
fn egress_reaches_the_fake_internet_under_policy_and_nothing_else() {
    let forward_before = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("ip_forward");
    let fake = FakeNet::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = NetConfig::from_host();
    config.resolvers = vec![fake.addr(2).parse().expect("resolver")];
    // `_cleanup` destroys whatever a failed assertion leaves running when dropped.
    let _cleanup = runtime(dir.path());
    let net_rt = LinuxRuntime::with_network(common::raw_runtime(dir.path()), config);
    let _net_cleanup = DestroyOnDrop(&net_rt);
    let loopback = TcpListener::bind("127.0.0.1:0").expect("loopback listener");
    let any = TcpListener::bind("0.0.0.0:0").expect("host listener");

    // Workspace layer allows only the fake host's /29 and denies bad.test; the sandbox
    // layer narrows it further by denying .3.
    let layers = vec![policy(&[&format!("{}.0/29", fake.prefix)], &["bad.test"]), policy(&[], &[&fake.addr(3)])];
    let a = net_rt.start_with_network(&common::spec("default"), &NetworkSpec::egress(layers)).expect("start a");
    let b = net_rt.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![])).expect("start b");
    let a_addr = net_rt.sandbox_address(a.id).expect("a address");
    let b_addr = net_rt.sandbox_address(b.id).expect("b address").to_string();
    let gateway = Ipv4Addr::from(u32::from(a_addr) - 1).to_string();

    let results = [
        ("fake host by address", probe(&a, &fake.addr(2), 8080)),
        ("fake host by name (UDP DNS)", probe(&a, "good.test", 8080)),
        ("denied CIDR", probe(&a, &fake.addr(3), 8080)),
        ("denied domain", probe(&a, "bad.test", 8080)),
        ("host loopback API", probe(&a, "127.0.0.1", loopback.local_addr().expect("port").port())),
        ("host via gateway", probe(&a, &gateway, any.local_addr().expect("port").port())),
        ("host via its fake-net address", probe(&a, &fake.addr(1), any.local_addr().expect("port").port())),
    ];
    assert_eq!(results[0].1, format!("ok {} hello", fake.addr(2)), "{results:?}");
    assert_eq!(results[1].1, format!("ok {} hello", fake.addr(2)), "{results:?}");
    assert!(results[2].1.starts_with("err"), "{results:?}");
    assert!(results[3].1.starts_with(&format!("err {}", fake.addr(4))), "bad.test resolves but must not connect: {results:?}");
    for (what, got) in &results[4..7] {
        assert!(got.starts_with("err"), "{what} reachable: {got}");
    }
    // The policy was a's only: b reaches .3.
    assert_eq!(probe(&b, &fake.addr(3), 8080), format!("ok {} hello", fake.addr(3)));

    // A listener inside b: reachable from b itself, not from a, the fake host or the host.
    let (code, out) = agent_sh(&b, "/usr/bin/python3 -c 'import socket,time\ns=socket.socket();s.bind((\"0.0.0.0\",9000));s.listen(8)\nwhile True: c,_=s.accept();c.sendall(b\"b\");c.close()' >/dev/null 2>&1 </dev/null & for i in $(seq 100); do python3 -c 'import socket;socket.create_connection((\"127.0.0.1\",9000))' 2>/dev/null && exit 0; sleep 0.1; done; exit 1");
    assert_eq!(code, Some(0), "b's listener: {out}");
    assert_eq!(probe(&b, &b_addr, 9000), format!("ok {b_addr} b"));
    assert!(probe(&a, &b_addr, 9000).starts_with("err"), "a reaches b");
    assert!(fake.probe(&b_addr, 9000).starts_with("err"), "the outside connects into b");
    let target: SocketAddr = format!("{b_addr}:9000").parse().expect("addr");
    assert!(TcpStream::connect_timeout(&target, Duration::from_secs(3)).is_err(), "the host connects into b");

    for handle in [&a, &b] {
        net_rt.destroy(handle).expect("destroy");
        assert!(!link_exists(handle.id), "veth left behind");
        assert!(!nft_has_chain(handle.id), "nft chain left behind");
        assert_eq!(net_rt.sandbox_address(handle.id), None, "lease left behind");
    }
    let leases_left = std::fs::read_dir("/run/sandboxd/net/leases").map(|d| d.count()).unwrap_or(0);
    if leases_left == 0 {
        let forward_after = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("ip_forward");
        assert_eq!(forward_after, forward_before, "ip_forward not restored");
    }
}

#[test]
fn network_none_has_only_loopback() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = runtime(dir.path());
    let net_rt = LinuxRuntime::with_network(common::raw_runtime(dir.path()), NetConfig::from_host());
    let _net_cleanup = DestroyOnDrop(&net_rt);
    let handle = net_rt.start_with_network(&common::spec("default"), &NetworkSpec::none()).expect("start");
    let (code, out) = agent_sh(&handle, "ls /sys/class/net");
    assert_eq!((code, out.trim()), (Some(0), "lo"));
    assert_eq!(net_rt.sandbox_address(handle.id), None);
    net_rt.destroy(&handle).expect("destroy");
}
