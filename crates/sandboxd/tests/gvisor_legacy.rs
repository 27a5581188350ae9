//! A gVisor sandbox of the old agent-dir layout (its `/.sandboxd/run` the host dir
//! `<state>/agent`, reached by the host by name), started as an earlier sandboxd did
//! (failpoint `start.gvisor.legacy_layout`) and adopted by a new server's reconcile
//! (REVIEW13 #1): it can no longer point the host's agent calls at another sandbox, nor
//! fill the data dir through that dir, its output, or a file it held open before; it
//! keeps running and answering. Skipped where runsc is missing.

mod common;
mod gvisor_common;

use gvisor_common::*;
use sandboxd_runtime::{Runtime, SandboxHandle, SandboxSpec};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;

fn spec_with_disk(disk_mb: u32) -> SandboxSpec {
    SandboxSpec {
        disk_mb,
        ..common::spec("default")
    }
}

/// Bytes of the deleted files of the state dir's filesystem `handle`'s processes hold
/// open (the gofer's paths are those of its own root: told by the inode).
fn held_deleted_bytes(rt: &Gvisor, handle: &SandboxHandle) -> u64 {
    let dev = std::fs::metadata(&handle.state_dir)
        .expect("state dir")
        .dev();
    let mut seen = HashSet::new();
    let mut total = 0;
    for pid in rt.cgroups().procs(handle.id) {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"));
        for entry in fds.into_iter().flatten().flatten() {
            let Ok(meta) = std::fs::metadata(entry.path()) else {
                continue;
            };
            if meta.is_file() && meta.dev() == dev && meta.nlink() == 0 && seen.insert(meta.ino()) {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

/// A sandbox started in the old layout (as an earlier sandboxd did), its `/root/who`
/// saying "attacker", and the scenario (the failpoint set) until the start.
fn start_legacy(rt: &Gvisor) -> SandboxHandle {
    let scenario = fail::FailScenario::setup();
    fail::cfg("start.gvisor.legacy_layout", "return").expect("failpoint");
    let started = rt.start(&spec_with_disk(64));
    fail::remove("start.gvisor.legacy_layout");
    scenario.teardown();
    let handle = started.expect("start the old-layout sandbox");
    // The old layout: the host reaches the agent by a name in the sandbox's own dir.
    assert_eq!(
        handle.agent_socket,
        handle.state_dir.join("agent").join("agent.sock")
    );
    let (code, _) = common::agent_sh(&handle, "echo attacker > /root/who");
    assert_eq!(code, Some(0));
    handle
}

/// A new server's adoption of `handles` (its start-up reconcile).
fn adopt(rt: &Gvisor, handles: &[&SandboxHandle]) {
    let keep: HashSet<_> = handles.iter().map(|h| h.id).collect();
    rt.reconcile(&keep, &HashSet::new());
}

/// An old-layout sandbox and a victim; the old-layout one renames its agent's socket and
/// puts a symlink to the victim's in its place, before its adoption (`before`) or after;
/// what three calls on its handle then answer (`None`: failed).
fn redirect(before: bool) -> Vec<Option<String>> {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return Vec::new();
    };
    let attacker = start_legacy(&rt);
    let victim = rt.start(&spec_with_disk(64)).expect("start the victim");
    let (code, _) = common::agent_sh(&victim, "echo victim > /root/who");
    assert_eq!(code, Some(0));
    let swap = format!(
        "cd /.sandboxd/run; mv agent.sock moved; ln -s {} agent.sock; echo tried",
        victim.agent_socket.display()
    );
    if before {
        assert_eq!(common::agent_sh(&attacker, &swap).0, Some(0));
    }
    adopt(&rt, &[&attacker, &victim]);
    if !before {
        assert_eq!(common::agent_sh(&attacker, &swap).0, Some(0));
    }
    let answers = (0..3).map(|_| who_answers(&attacker)).collect();
    // The victim is untouched.
    assert_eq!(who_answers(&victim).as_deref(), Some("victim\n"));
    rt.destroy(&attacker)
        .expect("destroy the old-layout sandbox");
    rt.destroy(&victim).expect("destroy the victim");
    assert!(!attacker.state_dir.exists(), "its state dir is removed");
    answers
}

/// Redirected after the adoption: the sandbox's dir is no longer where the server
/// connects; every call lands in the sandbox itself.
#[test]
fn an_adopted_sandbox_of_the_old_layout_cannot_point_its_agent_calls_at_another_sandbox() {
    for answer in redirect(false) {
        assert_eq!(
            answer.as_deref(),
            Some("attacker\n"),
            "the old-layout sandbox's call ran elsewhere (or failed)"
        );
    }
}

/// Redirected before the upgrade: the new server never follows the planted name; the
/// sandbox's agent is then not reached at all (it can still be snapshotted and deleted).
#[test]
fn a_socket_redirected_before_the_upgrade_is_never_followed_after_it() {
    for answer in redirect(true) {
        assert_eq!(
            answer, None,
            "a call reached a sandbox through the planted name"
        );
    }
}

#[test]
fn an_adopted_sandbox_of_the_old_layout_cannot_fill_the_data_dir() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let attacker = start_legacy(&rt);
    // Before the upgrade: a file opened in the dir and deleted, written once told to.
    let hold = "cd /.sandboxd/run && setsid sh -c 'exec 3>held; rm held; \
                while [ ! -e /tmp/go ]; do sleep 0.1; done; \
                head -c 209715200 /dev/zero >&3; echo $? > /tmp/held-rc' \
                >/dev/null 2>&1 </dev/null & echo holding";
    assert_eq!(
        common::agent_sh(&attacker, hold),
        (Some(0), "holding\n".into())
    );
    adopt(&rt, &[&attacker]);
    // A new file in the dir, the agent's output, the file held open.
    // The held file's writer is given ten seconds. (This runsc keeps a deleted file's
    // writes in the sentry's memory, so the old layout showed no growth there either;
    // the check guards a runsc that writes them through.)
    let fill = "dd if=/dev/zero of=/.sandboxd/run/big bs=1M count=200 2>&1; \
                head -c 209715200 /dev/zero > /proc/1/fd/1; echo head=$?; touch /tmp/go; \
                for i in $(seq 100); do [ -e /tmp/held-rc ] && break; sleep 0.1; done; \
                cat /tmp/held-rc 2>&1";
    let (_, out) = common::agent_sh(&attacker, fill);
    let outside = walk_sizes(&attacker.state_dir);
    let held = held_deleted_bytes(&rt, &attacker);
    assert!(
        held < 16 << 20,
        "{held} bytes written to a deleted file it held open ({out})"
    );
    assert!(
        outside < 16 << 20,
        "{outside} bytes written to the data dir by the old-layout sandbox ({out})"
    );
    // It still answers as itself.
    assert_eq!(
        common::agent_sh(&attacker, "cat /root/who"),
        (Some(0), "attacker\n".into())
    );
    rt.destroy(&attacker)
        .expect("destroy the old-layout sandbox");
    assert!(!attacker.state_dir.exists(), "its state dir is removed");
}
