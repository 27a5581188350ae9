//! What the network-table tests share: `nft` in the test's own network namespace, a
//! runtime with network state of its own, and a namespace whose `nft` runs are counted
//! (a recording `nft` first on PATH).

#![allow(dead_code)]

use super::common;
use sandboxd_runtime::linux::{LinuxRuntime, NetConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `nft ARGS…`'s output, `None` when it fails.
pub fn nft(args: &[&str]) -> Option<String> {
    let out = Command::new("/usr/sbin/nft")
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("nft");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The shared `inet sandboxd` table as `nft` lists it, if there is one.
pub fn table() -> Option<String> {
    nft(&["list", "table", "inet", "sandboxd"])
}

/// A runtime on `dir` with egress networking whose leases live in `state`.
pub fn net_runtime(dir: &Path, state: &Path) -> LinuxRuntime {
    let mut config = NetConfig::from_host();
    config.state_dir = state.to_path_buf();
    // A documentation address: nothing is sent to it (no traffic in these tests).
    config.resolvers = vec!["192.0.2.53".parse().expect("resolver")];
    LinuxRuntime::with_network(common::raw_runtime(dir), config)
}

/// The `nft` runs made since [`counted_nft_in_own_netns`], one line of arguments each.
pub struct NftCalls {
    log: PathBuf,
    _bin: tempfile::TempDir,
}

impl NftCalls {
    pub fn count(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .count()
    }
}

/// Moves this thread (and what it starts) into a new network namespace and puts a
/// recording `nft` first on PATH (sleeping `delay` first, e.g. `"0.3"`, so that callers
/// queue behind it); the in-process libnftables is switched off so every run is seen.
/// nextest runs each test in a process of its own: the PATH is this test's alone.
pub fn counted_nft_in_own_netns(delay: Option<&str>) -> NftCalls {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
    let bin = tempfile::tempdir().expect("tempdir");
    let log = bin.path().join("calls");
    let wrapper = bin.path().join("nft");
    let sleep = delay.map(|d| format!("sleep {d}\n")).unwrap_or_default();
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> {}\n{sleep}exec /usr/sbin/nft \"$@\"\n",
        log.display()
    );
    std::fs::write(&wrapper, script).expect("wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::env::set_var("PATH", path);
    std::env::remove_var("SANDBOXD_LIBNFTABLES");
    NftCalls { log, _bin: bin }
}

/// This process's children that are, or may be, a reaper of the parked network (its
/// parks and runtimes start them): its command line, or none (a just-started one is
/// still being exec'd; an exiting one's memory is gone). Zombies are not: a reaper is
/// one only once its descriptors, and its lock, are closed (then the thread waiting for
/// it reaps it), and a sandbox process killed by a destroy may be left one of ours.
pub fn reapers() -> Vec<i32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().collect())
                .unwrap_or_default();
            if fields.len() < 2 || fields[1] != me || fields[0] == "Z" {
                return false;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.is_empty() || String::from_utf8_lossy(&cmdline).contains("__net-reaper\0")
        })
        .collect()
}

/// The names in `dir`, sorted (none when it does not exist).
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_str()?.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The id a lease's link and nft entries are named after (its third field).
pub fn named_after(state: &Path, id: uuid::Uuid) -> Option<String> {
    let text = sandboxd_runtime::linux::file_lock::with_dir_lock(state, || {
        std::fs::read_to_string(state.join("leases").join(id.to_string())).ok()
    })??;
    text.split_whitespace().nth(2).map(str::to_owned)
}

/// Polls `done` for up to a minute (a bound for a loaded machine, not a measure).
pub fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `eth0` in sandbox `sb` is up with its lease's address and a default route through
/// it (a gateway, not a link-scope route).
///
/// Its carrier is on when the start returns (both veth ends up: set synchronously);
/// its `operstate` follows on the kernel's link-watch work, a moment later when links
/// change at once (two starts together read `unknown` or `down` first), so it is
/// waited for.
pub fn assert_eth0_linked(rt: &LinuxRuntime, sb: &sandboxd_runtime::SandboxHandle) {
    let inside = common::sh_ok(
        sb,
        "cat /sys/class/net/eth0/carrier; cat /proc/net/route; cat /proc/net/fib_trie",
    );
    assert!(inside.starts_with('1'), "eth0 has no carrier: {inside}");
    eventually("eth0's operstate is up", || {
        common::sh_ok(sb, "cat /sys/class/net/eth0/operstate").trim() == "up"
    });
    let default_route = inside.lines().any(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        fields.len() > 2 && fields[..2] == ["eth0", "00000000"] && fields[2] != "00000000"
    });
    assert!(default_route, "no default route via eth0: {inside}");
    let address = rt.sandbox_address(sb.id).expect("the sandbox's address");
    assert!(
        inside.contains(&address.to_string()),
        "eth0 lacks {address}: {inside}"
    );
}

/// Ends what parking networks in `state` left (the test set a long linger): the
/// reapers this process started are killed, then a runtime opened with no linger
/// removes the parked networks, and its reaper ends. The reapers are found as this
/// process's children (its parks start them), not by their command line alone: that
/// reads empty while a just-started one is still being exec'd (such a one was missed,
/// and lived on with the lock: a CI failure), and once a killed one's memory is gone
/// but before its descriptors, and its lock, are.
pub fn end_parked_networks(run_dir: &Path, state: &Path) {
    let found = reapers();
    assert!(!found.is_empty(), "no reaper for the parked network");
    for pid in found {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL)
            .expect("kill the reaper");
    }
    common::wait_for("the killed reaper lets go of its lock", || {
        reapers().is_empty()
    });
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "0");
    let _reopened = net_runtime(run_dir, state);
    let parked = state.join("parked");
    common::wait_for("the parked network is removed", || {
        names(&parked).is_empty()
    });
    common::wait_for("its reaper ends", || reapers().is_empty());
}
