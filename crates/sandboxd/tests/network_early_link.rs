//! A sandbox taking a host side made earlier (here a parked network, as `sandboxd run`
//! takes) gets its link while it starts, as soon as its network namespace exists: once
//! started, its `eth0` is up with the lease's address and a default route via the host
//! end; a start failing at any later step (the link made already) leaves no link,
//! sandbox dir, mount or process, and its network parked again for the next start.
//!
//! Like network_parked.rs, the test runs in a network namespace and with network state
//! of its own: no other test's sandbox takes its parked network; it leaves no reaper.

mod common;
mod netns_common;

use common::{mounts_under, runtime, sh_ok};
use netns_common::{
    assert_eth0_linked, counted_nft_in_own_netns, end_parked_networks, named_after, names,
    net_runtime,
};
use sandboxd_runtime::linux::LinuxRuntime;
use sandboxd_runtime::{NetworkSpec, Runtime, RuntimeError, SandboxHandle};
use std::process::{Command, Stdio};

/// The steps after the sandbox's network namespace exists, each made to fail in turn.
const LATE_STEPS: [&str; 4] = [
    "start.mount_root",
    "start.handshake",
    "start.handle",
    "network.connect",
];

fn link_named_after(id: &str) -> bool {
    let ifname = format!("sbx{}", &id.replace('-', "")[..12]);
    Command::new("ip")
        .args(["link", "show", &ifname])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn start(rt: &LinuxRuntime) -> Result<SandboxHandle, RuntimeError> {
    rt.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
}

#[test]
fn a_taken_network_is_linked_during_the_start_and_a_late_failure_leaves_no_link() {
    let _nft = counted_nft_in_own_netns(None);
    // Long enough that nothing parked expires while the test looks at it.
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "3600");
    let scenario = fail::FailScenario::setup();
    let state = tempfile::tempdir().expect("tempdir");
    let run_dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = runtime(run_dir.path());
    let one_shot = net_runtime(run_dir.path(), state.path()).with_parked_networks();
    let parked = || names(&state.path().join("parked"));

    // The first start makes its network and parks it at destroy.
    let a = start(&one_shot).expect("start a");
    let name = named_after(state.path(), a.id).expect("a's lease");
    one_shot.destroy(&a).expect("destroy a");
    assert_eq!(parked(), std::slice::from_ref(&name));

    // The next takes it, linked during its start: eth0 up, addressed, routed.
    let b = start(&one_shot).expect("start b");
    assert_eq!(named_after(state.path(), b.id), Some(name.clone()));
    assert!(link_named_after(&name), "b's host end is missing");
    assert_eth0_linked(&one_shot, &b);
    one_shot.destroy(&b).expect("destroy b");
    assert_eq!(parked(), std::slice::from_ref(&name));

    // Each step after the namespace exists fails in turn: the link made early goes
    // with the sandbox, the network is parked again, nothing else is left.
    for step in LATE_STEPS {
        fail::cfg(step, "return").expect("failpoint");
        let failed = start(&one_shot);
        fail::remove(step);
        assert!(failed.is_err(), "{step}: the start did not fail");
        common::wait_for(&format!("{step}: the link goes"), || {
            !link_named_after(&name)
        });
        assert_eq!(parked(), std::slice::from_ref(&name), "{step}: not parked");
        assert_eq!(
            names(&run_dir.path().join("sandboxes")),
            Vec::<String>::new(),
            "{step}: sandbox dirs left"
        );
        assert_eq!(
            mounts_under(run_dir.path()),
            Vec::<String>::new(),
            "{step}: mounts left"
        );
    }

    // And the next start takes it and works.
    let c = start(&one_shot).expect("start c");
    assert_eq!(named_after(state.path(), c.id), Some(name.clone()));
    assert!(sh_ok(&c, "cat /sys/class/net/eth0/operstate").starts_with("up"));
    one_shot.destroy(&c).expect("destroy c");
    scenario.teardown();

    // Nothing lingers: the reaper started for the parked network (with the hour's
    // linger) is killed, and one started by the next runtime with none removes it.
    end_parked_networks(run_dir.path(), state.path());
}
