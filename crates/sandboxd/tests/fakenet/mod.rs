//! A fake "internet" host in a network namespace the test makes (198.18.R.0/29, a
//! benchmarking range; a veth from the host): TCP on :8080 and DNS on :53. No traffic
//! leaves the machine. `PROBE` connects from inside a sandbox.
//!
//! Each fake net's namespace is named after the test process that made it
//! (`sbxtest-<pid>-<start ticks>-<tag>`): a test killed mid-way never drops its fake
//! net, so each new one first removes those whose maker is gone ([`remove_stale`]),
//! and never one whose maker still runs (a test running in parallel: nextest runs
//! tests as processes of their own).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A TCP service on :8080 answering "hello", and DNS on :53 (good.test → .2,
/// bad.test → .4, anything else NXDOMAIN), at .2, .3 and .4 of the fake host.
pub const FAKE_HOST: &str = r#"
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
pub const PROBE: &str = r#"
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

/// Prints "answered" when the resolver at `argv[1]` answers an A query for good.test
/// over UDP (three tries of a second each), "silent" when it never does.
pub const DNS_PROBE: &str = r#"
import socket, sys
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04good\x04test\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
for _ in range(3):
    try:
        s.sendto(q, (sys.argv[1], int(sys.argv[2]))); s.recv(512); print("answered"); sys.exit(0)
    except OSError:
        pass
print("silent")
"#;

pub fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fake outside host: its namespace, the host's veth to it, and its server.
pub struct FakeNet {
    pub ns: String,
    pub veth: String,
    pub prefix: String,
    server: Child,
}

impl FakeNet {
    pub fn new() -> FakeNet {
        remove_stale();
        let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let r = u8::from_str_radix(&tag[..2], 16).expect("hex");
        let me = std::process::id();
        let ticks = start_ticks(me).expect("this process's start time");
        let (ns, veth, prefix) = (
            format!("{NS_PREFIX}{me}-{ticks}-{tag}"),
            format!("sbt{tag}"),
            format!("198.18.{r}"),
        );
        run(&["ip", "netns", "add", &ns]);
        let mut fake = FakeNet {
            ns: ns.clone(),
            veth: veth.clone(),
            prefix: prefix.clone(),
            server: Command::new("true").spawn().expect("true"),
        };
        run(&[
            "ip", "link", "add", &veth, "type", "veth", "peer", "name", "fake0", "netns", &ns,
        ]);
        run(&["ip", "addr", "add", &format!("{prefix}.1/29"), "dev", &veth]);
        run(&["ip", "link", "set", &veth, "up"]);
        for host in [2, 3, 4] {
            run(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{prefix}.{host}/29"),
                "dev",
                "fake0",
            ]);
        }
        run(&["ip", "-n", &ns, "link", "set", "fake0", "up"]);
        run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        // So that connecting into a sandbox from here is a real attempt, not "no route".
        run(&[
            "ip",
            "-n",
            &ns,
            "route",
            "add",
            "10.213.0.0/16",
            "via",
            &format!("{prefix}.1"),
        ]);
        let _ = fake.server.wait();
        fake.server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "/usr/bin/python3",
                "-c",
                FAKE_HOST,
                &prefix,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("fake host server");
        let mut line = String::new();
        BufReader::new(fake.server.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("ready line");
        assert_eq!(line.trim(), "ready");
        fake
    }

    pub fn addr(&self, host: u8) -> String {
        format!("{}.{host}", self.prefix)
    }

    /// Runs the probe from the fake host's namespace.
    pub fn probe(&self, host: &str, port: u16) -> String {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "/usr/bin/python3",
                "-c",
                PROBE,
                host,
                &port.to_string(),
            ])
            .output()
            .expect("probe");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for FakeNet {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// Prefix of the fake nets' namespaces.
const NS_PREFIX: &str = "sbxtest-";

/// The start time (clock ticks after boot, `/proc/PID/stat` field 22) of process
/// `pid`, which tells it from a later process given the same PID.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// The maker (PID, start ticks) and tag a fake net's namespace name `ns` records
/// (`None`: not such a name, e.g. an older helper's `sbxtest-<tag>`, whose maker
/// cannot be told: left alone).
fn maker_of(ns: &str) -> Option<(u32, u64, &str)> {
    let mut parts = ns.strip_prefix(NS_PREFIX)?.splitn(3, '-');
    let pid = parts.next()?.parse().ok()?;
    let ticks = parts.next()?.parse().ok()?;
    let tag = parts.next()?;
    let hex = tag.len() == 8 && tag.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then_some((pid, ticks, tag))
}

/// Removes the fake nets whose maker is gone (a test killed mid-way): each one's fake
/// host server (a process in its namespace running [`FAKE_HOST`], which that test
/// started), its veth and its namespace. A fake net whose maker runs (same PID, same
/// start time) is never touched.
pub fn remove_stale() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((pid, ticks, tag)) = maker_of(&name) else {
            continue;
        };
        if start_ticks(pid) == Some(ticks) {
            continue;
        }
        let servers = fake_hosts_in(&entry.path());
        for &server in &servers {
            // SAFETY: kill(2) on a fake host server a dead test process started; the
            // namespace's inode and the exact command line identify it.
            unsafe { libc::kill(server, libc::SIGKILL) };
        }
        // Gone (or a zombie, which holds no namespace) before the namespace is removed.
        for _ in 0..1000 {
            if fake_hosts_in(&entry.path()).is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let quiet = |cmd: &mut Command| {
            let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        quiet(Command::new("ip").args(["link", "del", &format!("sbt{tag}")]));
        // Another test removing it at the same time: either one does.
        quiet(Command::new("ip").args(["netns", "del", &name]));
    }
}

/// Processes in the network namespace bound at `ns_path` running the fake host server.
fn fake_hosts_in(ns_path: &std::path::Path) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(inode) = std::fs::metadata(ns_path).map(|m| m.ino()) else {
        return Vec::new();
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net")).is_ok_and(|m| m.ino() == inode)
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
                args.len() >= 3 && args[1] == b"-c" && args[2] == FAKE_HOST.as_bytes()
            })
        })
        .collect()
}

/// Whether the host-side veth of sandbox `id` exists.
pub fn link_exists(id: &str) -> bool {
    let simple: String = id.chars().filter(|c| *c != '-').take(12).collect();
    Command::new("ip")
        .args(["link", "show", &format!("sbx{simple}")])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Prints "ok <the sandbox's own address> <data>" or "err <exception>" for a TCP
/// connect from inside a sandbox: the address its network stack sends from.
pub const LOCAL_PROBE: &str = r#"
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3); print("ok", s.getsockname()[0], s.recv(64).decode())
except Exception as e:
    print("err", type(e).__name__)
"#;

/// The address the host's lease of sandbox `id` gives it (`None`: no lease), from the
/// host-wide network state every sandboxd on the host shares.
pub fn leased_address(id: &str) -> Option<String> {
    let dir = std::path::Path::new("/run/sandboxd/net");
    let text = sandboxd_runtime::linux::file_lock::with_dir_lock(dir, || {
        std::fs::read_to_string(dir.join("leases").join(id)).ok()
    })??;
    let net: std::net::Ipv4Addr = text
        .split_whitespace()
        .next()?
        .split('/')
        .next()?
        .parse()
        .ok()?;
    Some(std::net::Ipv4Addr::from(u32::from(net) + 2).to_string())
}

/// Whether the shared `inet sandboxd` table holds sandbox `id`'s entries (the set
/// elements keyed by its interface).
pub fn nft_entries_exist(id: &str) -> bool {
    let simple: String = id.chars().filter(|c| *c != '-').take(12).collect();
    let ifname = format!("\"sbx{simple}\"");
    Command::new("nft")
        .args(["list", "table", "inet", "sandboxd"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&ifname))
}
