//! A held `reaper.lock` that will be let go of soon does not leave a parked network
//! without a reaper: a reaper started while someone briefly holds the lock (a prober's
//! child between its fork and its exec shares the probe's hold) waits for it, and a
//! runtime opening while the holder is exiting (a killed reaper keeps its lock until
//! its descriptors are closed, late in its exit) starts a reaper that takes over. A
//! reaper killed while removing networks leaves them to the next.
//!
//! Like network_early_link.rs, each test runs in a network namespace and with network
//! state of its own, and leaves no reaper.

mod common;
mod netns_common;

use common::runtime;
use netns_common::{counted_nft_in_own_netns, names, net_runtime, reapers};
use sandboxd_runtime::{NetworkSpec, Runtime};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Parks one network in `state` (its reaper lingering an hour), then kills that reaper
/// and waits until it is reaped: a parked network with no reaper and a free lock.
fn park_one(run_dir: &Path, state: &Path) {
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "3600");
    let one_shot = net_runtime(run_dir, state).with_parked_networks();
    let spec = common::spec("default");
    let sandbox = one_shot
        .start_with_network(&spec, &NetworkSpec::egress(vec![]))
        .expect("start");
    one_shot.destroy(&sandbox).expect("destroy");
    assert_eq!(names(&state.join("parked")).len(), 1, "nothing parked");
    for pid in reapers() {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL)
            .expect("kill the reaper");
    }
    common::wait_for("the killed reaper lets go of its lock", || {
        reapers().is_empty()
    });
}

/// Whether someone holds `state`'s `reaper.lock` (probed without keeping it).
fn lock_held(state: &Path) -> bool {
    let file = std::fs::File::open(state.join("reaper.lock")).expect("reaper.lock");
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(_probe) => false,
        Err((_, errno)) => {
            assert_eq!(errno, nix::errno::Errno::EWOULDBLOCK, "flock");
            true
        }
    }
}

/// A process holding `state`'s `reaper.lock` until its stdin closes, once it does.
fn holder(mut cmd: Command, state: &Path) -> Child {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the lock holder");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("the holder's line");
    assert_eq!(line.trim(), "held");
    assert!(lock_held(state), "the holder does not hold the lock");
    child
}

#[test]
fn a_reaper_started_while_the_lock_is_briefly_held_waits_for_it() {
    let _nft = counted_nft_in_own_netns(None);
    let state = tempfile::tempdir().expect("tempdir");
    let run_dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = runtime(run_dir.path());
    park_one(run_dir.path(), state.path());

    // flock(1) holds the lock (as a forked child would hold its parent's probe) while a
    // reaper starts; it lets go once the reaper is seen waiting (or gone).
    let mut flock = Command::new("flock");
    flock
        .arg(state.path().join("reaper.lock"))
        .args(["sh", "-c", "echo held; cat >/dev/null"]);
    let mut holder = holder(flock, state.path());
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "0");
    let mut reaper = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .arg("__net-reaper")
        .arg(state.path())
        .spawn()
        .expect("the reaper");
    let lock = state.path().join("reaper.lock");
    common::wait_for("the reaper opens its lock or ends", || {
        let opened = std::fs::read_dir(format!("/proc/{}/fd", reaper.id()))
            .map(|fds| {
                fds.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|to| to == lock))
            })
            .unwrap_or(false);
        // Ended (a zombie until waited for below).
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", reaper.id()));
        let ended = stat.is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        });
        opened || ended
    });
    drop(holder.stdin.take());
    holder.wait().expect("the holder ends");
    let status = reaper.wait().expect("the reaper ends");
    assert!(status.success(), "the reaper failed: {status}");
    assert_eq!(
        names(&state.path().join("parked")),
        Vec::<String>::new(),
        "the reaper left the parked network"
    );
}

/// The stand-in for a reaper in its exit: its main thread has exited (the process's
/// `PF_EXITING` is set, as a killed reaper's is) while another thread keeps the lock
/// until stdin closes.
const EXITING_HOLDER: &str = r#"
import ctypes, fcntl, os, platform, sys, threading
lock = open(sys.argv[1], "w")
fcntl.flock(lock, fcntl.LOCK_EX)
def hold():
    sys.stdin.read()
    os._exit(0)
threading.Thread(target=hold).start()
print("held", flush=True)
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
"#;

#[test]
fn a_runtime_opening_while_the_reaper_exits_starts_one() {
    let _nft = counted_nft_in_own_netns(None);
    let state = tempfile::tempdir().expect("tempdir");
    let run_dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = runtime(run_dir.path());
    park_one(run_dir.path(), state.path());

    let mut python = Command::new("/usr/bin/python3");
    python
        .args(["-c", EXITING_HOLDER])
        .arg(state.path().join("reaper.lock"));
    let mut holder = holder(python, state.path());
    let exiting = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", holder.id()))
            .expect("the holder's stat");
        let flags: u64 = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(6)?.parse().ok())
            .expect("flags");
        flags & 0x4 != 0 // PF_EXITING
    };
    common::wait_for("the holder's main thread exits", exiting);

    // The runtime starts a reaper now (synchronously), which takes over once the
    // holder lets go.
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "0");
    let _reopened = net_runtime(run_dir.path(), state.path());
    let started: Vec<i32> = reapers()
        .into_iter()
        .filter(|&pid| pid != holder.id() as i32)
        .collect();
    drop(holder.stdin.take());
    holder.wait().expect("the holder ends");
    assert_eq!(
        started.len(),
        1,
        "no reaper was started while the lock's holder exits"
    );
    common::wait_for("the parked network is removed", || {
        names(&state.path().join("parked")).is_empty()
    });
    common::wait_for("the reaper ends", || reapers().is_empty());
}

/// A reaper killed after it took expired networks off the parked list and before it
/// removed them leaves them to the next: a runtime opening the state starts a reaper
/// that removes them, and the shared table with the last. Before, the markers went
/// first, and such a lease (named by no marker, with no owner) stayed for good with
/// the table (seen in CI as a leftover `inet sandboxd` table).
#[test]
fn networks_a_killed_reaper_was_removing_are_removed_by_the_next() {
    let _nft = counted_nft_in_own_netns(None);
    let state = tempfile::tempdir().expect("tempdir");
    let run_dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = runtime(run_dir.path());
    park_one(run_dir.path(), state.path());
    let leases = || names(&state.path().join("leases"));
    assert_eq!(leases().len(), 1, "the parked network's lease");

    // A reaper that takes it off the list at once, then holds before removing it.
    let mut reaper = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .arg("__net-reaper")
        .arg(state.path())
        .env("SANDBOXD_NET_LINGER_SECS", "0")
        .env("SANDBOXD_FAILPOINTS", "network.reap=pause")
        .stdin(Stdio::null())
        .spawn()
        .expect("the reaper");
    let listed = || {
        names(&state.path().join("parked"))
            .iter()
            .any(|name| uuid::Uuid::parse_str(name).is_ok())
    };
    common::wait_for("the reaper takes the network off the list", || !listed());
    reaper.kill().expect("kill the reaper");
    reaper.wait().expect("reap the reaper");
    assert_eq!(leases().len(), 1, "the paused reaper removed the lease");
    assert!(
        netns_common::table().is_some(),
        "the paused reaper removed the table"
    );

    // The next runtime opening the state starts a reaper that finishes the job.
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "0");
    let _reopened = net_runtime(run_dir.path(), state.path());
    netns_common::eventually("the lease the killed reaper held stayed", || {
        leases().is_empty()
    });
    netns_common::eventually("the table stayed", || netns_common::table().is_none());
    netns_common::eventually("the reaper stays", || reapers().is_empty());
    assert_eq!(names(&state.path().join("parked")), Vec::<String>::new());
}
