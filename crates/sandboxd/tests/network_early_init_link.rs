//! An egress start that takes a one-shot runtime's early init (what `sandboxd run`
//! does) links the network it took as soon as the init's network namespace exists,
//! while the init's make goes on; when that make then fails, the start goes on cold and
//! its link is made again, in the cold start's namespace (or, when that namespace cannot
//! be opened, in its PID 1's once started). Either way the sandbox's
//! `eth0` is up, addressed and routed, and one link is left for it, none after it.
//!
//! The same holds for a network the start makes (none to take), linked while the
//! start goes on too.
//!
//! Like network_early_link.rs, the test runs in a network namespace and with network
//! state of its own; it leaves no reaper.

mod common;
mod netns_common;

use common::mounts_under;
use netns_common::{
    assert_eth0_linked, counted_nft_in_own_netns, end_parked_networks, named_after, names,
    net_runtime,
};
use sandboxd_runtime::linux::{LinuxRuntime, Tethers};
use sandboxd_runtime::{NetworkSpec, Runtime, SandboxHandle};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

/// The host's links named `ifname` (a sandbox's host end), as `ip` lists them.
fn links_named(ifname: &str) -> usize {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|n| n.trim_end_matches(':').split('@').next() == Some(ifname))
        })
        .count()
}

fn ifname(named: &str) -> String {
    format!("sbx{}", &named.replace('-', "")[..12])
}

/// A one-shot runtime over `run_dir` with parked networks in `state`, its early init
/// begun (the built-in image's, parked in its root).
fn one_shot(run_dir: &Path, state: &Path, tethers: &Arc<Tethers>) -> LinuxRuntime {
    let spec = common::spec("default");
    net_runtime(run_dir, state)
        .with_parked_networks()
        .with_tethers(tethers.clone())
        .with_early_init(spec.disk_mb, "default", None)
}

fn start(rt: &LinuxRuntime) -> SandboxHandle {
    rt.start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start")
}

/// The sandbox's `eth0` is linked (up, addressed, routed) and one host end is named
/// after its lease.
fn assert_linked(rt: &LinuxRuntime, sb: &SandboxHandle, named: &str) {
    assert_eth0_linked(rt, sb);
    assert_eq!(links_named(&ifname(named)), 1, "one host end");
}

/// No sandbox or early init dir, and nothing mounted, is left under `run_dir`.
fn assert_no_sandbox_dirs_or_mounts(run_dir: &Path) {
    assert_eq!(
        names(&run_dir.join("sandboxes")),
        Vec::<String>::new(),
        "sandbox or early init dirs left"
    );
    assert_eq!(mounts_under(run_dir), Vec::<String>::new(), "mounts left");
}

#[test]
fn an_early_inits_namespace_is_linked_before_its_take_and_again_when_its_make_fails() {
    let _nft = counted_nft_in_own_netns(None);
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "3600");
    let scenario = fail::FailScenario::setup();
    let state = tempfile::tempdir().expect("tempdir");
    let run_dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = common::runtime(run_dir.path());
    let tethers = Tethers::new();
    let parked = || names(&state.path().join("parked"));

    // A first start makes its network and parks it at destroy.
    let first = one_shot(run_dir.path(), state.path(), &tethers);
    let a = start(&first);
    let name = named_after(state.path(), a.id).expect("a's lease");
    first.destroy(&a).expect("destroy a");
    first.discard_early_init();
    tethers.finish_released();
    assert_eq!(parked(), std::slice::from_ref(&name));

    // The next takes it and the early init, linked while the init was made.
    let second = one_shot(run_dir.path(), state.path(), &tethers);
    let b = start(&second);
    assert!(b.warm, "b did not take the early init");
    assert_eq!(named_after(state.path(), b.id), Some(name.clone()));
    assert_linked(&second, &b, &name);
    second.destroy(&b).expect("destroy b");
    second.discard_early_init();
    tethers.finish_released();
    assert_eq!(links_named(&ifname(&name)), 0, "b's link is left");

    // Its make fails after its namespace was told (and perhaps linked): the start is
    // cold, linked in its own namespace, and the early init's link is gone.
    fail::cfg("warm.park", "return").expect("failpoint");
    let third = one_shot(run_dir.path(), state.path(), &tethers);
    let c = start(&third);
    fail::remove("warm.park");
    assert!(!c.warm, "c took an early init whose make failed");
    assert_eq!(named_after(state.path(), c.id), Some(name.clone()));
    assert_linked(&third, &c, &name);
    third.destroy(&c).expect("destroy c");
    third.discard_early_init();
    tethers.finish_released();
    assert_eq!(links_named(&ifname(&name)), 0, "c's link is left");

    // Again, the early init's namespace surely told (its make waits before failing),
    // and the cold start's own namespace cannot be opened: the link made in the early
    // init's namespace is not taken for the sandbox's, which is connected once started.
    fail::cfg("warm.parking", "sleep(300)").expect("failpoint");
    fail::cfg("warm.park", "return").expect("failpoint");
    fail::cfg("start.netns_open", "return").expect("failpoint");
    let fourth = one_shot(run_dir.path(), state.path(), &tethers);
    let d = start(&fourth);
    fail::remove("warm.parking");
    fail::remove("warm.park");
    fail::remove("start.netns_open");
    assert!(!d.warm, "d took an early init whose make failed");
    assert_eq!(named_after(state.path(), d.id), Some(name.clone()));
    assert_linked(&fourth, &d, &name);
    fourth.destroy(&d).expect("destroy d");
    fourth.discard_early_init();
    tethers.finish_released();
    scenario.teardown();

    assert_eq!(links_named(&ifname(&name)), 0, "d's link is left");
    assert_eq!(
        parked(),
        std::slice::from_ref(&name),
        "the network is parked again"
    );
    assert_no_sandbox_dirs_or_mounts(run_dir.path());

    // Nothing lingers: the reaper started for the parked network (with the hour's
    // linger) is killed, and one started by the next runtime with none removes it.
    end_parked_networks(run_dir.path(), state.path());
}

/// Two egress starts at once on one one-shot runtime (nothing stops a caller): one
/// claims the early init, namespace and all, in one step, the other starts cold; each
/// sandbox's `eth0` is linked in its own namespace, with one host end each. Rounds,
/// since the race (a start told one init's namespace while the other takes the init)
/// is narrow.
#[test]
fn two_egress_starts_at_once_are_each_linked_in_their_own_namespace() {
    let _nft = counted_nft_in_own_netns(None);
    std::env::set_var("SANDBOXD_NET_LINGER_SECS", "3600");
    let state = tempfile::tempdir().expect("tempdir");
    let run_dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = common::runtime(run_dir.path());
    let tethers = Tethers::new();
    for round in 0..5 {
        let rt = one_shot(run_dir.path(), state.path(), &tethers);
        let started: Vec<SandboxHandle> = std::thread::scope(|s| {
            let starts: Vec<_> = (0..2).map(|_| s.spawn(|| start(&rt))).collect();
            starts
                .into_iter()
                .map(|t| t.join().expect("join"))
                .collect()
        });
        let warm = started.iter().filter(|h| h.warm).count();
        assert_eq!(warm, 1, "round {round}: starts that took the early init");
        for sb in &started {
            let name = named_after(state.path(), sb.id).expect("a lease");
            assert_linked(&rt, sb, &name);
        }
        for sb in &started {
            rt.destroy(sb).expect("destroy");
        }
        rt.discard_early_init();
        tethers.finish_released();
    }
    assert_no_sandbox_dirs_or_mounts(run_dir.path());
    end_parked_networks(run_dir.path(), state.path());
}

/// A start that finds no network to take (the first after an idle spell: nothing
/// parked, no spare) links the one it makes while the early init's make goes on, not
/// once the start has returned: its host end exists while the make is held. When that
/// make then fails, the start goes on cold and is linked again in its own namespace.
/// The runtime parks no networks, so that each start makes its own.
#[test]
fn a_made_network_is_linked_while_the_start_goes_on() {
    let _nft = counted_nft_in_own_netns(None);
    let scenario = fail::FailScenario::setup();
    let state = tempfile::tempdir().expect("tempdir");
    let run_dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = common::runtime(run_dir.path());
    let tethers = Tethers::new();
    let making = |fails: bool| {
        // Held before it ends (until removed), its namespace told; failing after, when
        // `fails`.
        fail::cfg("warm.parking", "pause").expect("failpoint");
        if fails {
            fail::cfg("warm.park", "return").expect("failpoint");
        }
        let spec = common::spec("default");
        let rt = net_runtime(run_dir.path(), state.path())
            .with_tethers(tethers.clone())
            .with_early_init(spec.disk_mb, "default", None);
        let host_end = ifname(&spec.id.to_string());
        let (sb, linked_during) = std::thread::scope(|s| {
            let unpause = common::Unpause("warm.parking");
            let started = s.spawn(|| rt.start_with_network(&spec, &NetworkSpec::egress(vec![])));
            // The start cannot return while the make is held: a link seen now was made
            // beside it. A bound for a loaded machine, not a measure.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            let mut seen = false;
            while !seen && std::time::Instant::now() < deadline {
                seen = links_named(&host_end) == 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert!(!started.is_finished(), "the start returned, its make held");
            drop(unpause);
            (started.join().expect("join").expect("start"), seen)
        });
        fail::remove("warm.park");
        assert_eq!(sb.warm, !fails, "took the early init");
        let named = named_after(state.path(), sb.id);
        assert_eq!(named, Some(sb.id.to_string()), "made for it, not taken");
        assert_linked(&rt, &sb, &sb.id.to_string());
        rt.destroy(&sb).expect("destroy");
        rt.discard_early_init();
        tethers.finish_released();
        assert_eq!(links_named(&host_end), 0, "the link is left");
        assert_eq!(
            names(&state.path().join("leases")),
            Vec::<String>::new(),
            "a lease outlived the sandbox (make failing: {fails})"
        );
        linked_during
    };
    assert!(making(false), "no link while the early init's make went on");
    assert!(making(true), "no link while the failing make went on");
    scenario.teardown();
    assert_no_sandbox_dirs_or_mounts(run_dir.path());
    assert_eq!(names(&state.path().join("parked")), Vec::<String>::new());
}
