//! The `fakenet` test helper removes the fake nets (network namespace, fake host
//! server, veth) of test processes killed mid-way, and never one of a test still
//! running beside it: each is named after the test process that made it (PID and start
//! time), and a new fake net removes those whose maker is gone.

mod fakenet;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Env var that makes [`helper_holds_a_fake_net_until_killed`] do its work.
const HOLD: &str = "FAKENET_TEST_HOLD";

/// Not a test of its own: run by [`a_killed_tests_fake_net_is_removed_and_a_live_ones_kept`]
/// as a child test process, it makes a fake net, prints its namespace and waits to be
/// killed (as a test killed mid-way would be, its fake net never dropped).
#[test]
#[ignore = "a helper process of a_killed_tests_fake_net_is_removed_and_a_live_ones_kept"]
fn helper_holds_a_fake_net_until_killed() {
    if std::env::var_os(HOLD).is_none() {
        return;
    }
    let fake = fakenet::FakeNet::new();
    println!("holding {}", fake.ns);
    std::thread::sleep(std::time::Duration::from_secs(600));
}

/// A child test process holding a fake net, and that fake net's namespace.
struct Holder {
    child: Child,
    ns: String,
}

impl Holder {
    fn spawn() -> Holder {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "helper_holds_a_fake_net_until_killed",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOLD, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the holder");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        let ns = out
            .lines()
            .map_while(Result::ok)
            // After libtest's "test <name> ... " on the same line.
            .find_map(|l| l.split("holding ").nth(1).map(|n| n.trim().to_owned()))
            .expect("the holder's fake net");
        Holder { child, ns }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ends the holders and removes their fake nets whatever the test's outcome (the
/// fake host servers they started, found in their namespace by command line).
struct Cleanup(Vec<Holder>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for h in &mut self.0 {
            h.kill();
            for pid in fake_hosts_in(&h.ns) {
                // SAFETY: kill(2) on a fake host server a holder of this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = Command::new("ip")
                .args(["link", "del", &veth_of(&h.ns)])
                .stderr(Stdio::null())
                .status();
            let _ = Command::new("ip")
                .args(["netns", "del", &h.ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The host-side veth of the fake net in namespace `ns` (named after its tag).
fn veth_of(ns: &str) -> String {
    format!("sbt{}", ns.rsplit('-').next().expect("tag"))
}

fn ns_path(ns: &str) -> std::path::PathBuf {
    Path::new("/run/netns").join(ns)
}

/// Processes in network namespace `ns` (by inode) running the fake host server.
fn fake_hosts_in(ns: &str) -> Vec<i32> {
    let Ok(inode) = std::fs::metadata(ns_path(ns)).map(|m| m.ino()) else {
        return Vec::new();
    };
    processes_in(inode)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                c.split(|b| *b == 0)
                    .any(|a| a == fakenet::FAKE_HOST.as_bytes())
            })
        })
        .collect()
}

/// Processes whose network namespace has inode `inode`.
fn processes_in(inode: u64) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net")).is_ok_and(|m| m.ino() == inode)
        })
        .collect()
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// A test process killed mid-way (SIGKILL: its fake net never dropped) leaves its
/// namespace, its fake host server and its veth; the next fake net made on the host
/// removes all three, and leaves alone the fake net of a test process still running
/// (made before it, as a parallel test's is).
#[test]
fn a_killed_tests_fake_net_is_removed_and_a_live_ones_kept() {
    let mut cleanup = Cleanup(vec![Holder::spawn(), Holder::spawn()]);
    let (dead, live) = (cleanup.0[0].ns.clone(), cleanup.0[1].ns.clone());
    let dead_inode = std::fs::metadata(ns_path(&dead))
        .expect("the dead's netns")
        .ino();
    assert!(
        !fake_hosts_in(&dead).is_empty(),
        "the holder's fake host runs"
    );
    cleanup.0[0].kill();
    assert!(
        ns_path(&dead).exists() && link_exists(&veth_of(&dead)),
        "a killed test's fake net stays until removed"
    );

    let own = fakenet::FakeNet::new();
    assert!(
        !ns_path(&dead).exists(),
        "the killed test's namespace {dead} is left"
    );
    assert_eq!(
        processes_in(dead_inode),
        Vec::<i32>::new(),
        "processes left in the killed test's namespace"
    );
    assert!(
        !link_exists(&veth_of(&dead)),
        "the killed test's veth is left"
    );
    assert!(
        ns_path(&live).exists(),
        "a live test's namespace was removed"
    );
    assert!(
        link_exists(&veth_of(&live)),
        "a live test's veth was removed"
    );
    assert!(
        !fake_hosts_in(&live).is_empty(),
        "a live test's fake host was ended"
    );
    assert_eq!(
        own.probe(&own.addr(2), 8080),
        format!("ok {} hello", own.addr(2))
    );
    drop(own);
}
