//! The gVisor sandbox's `/.sandboxd/run` (a host dir the sandbox can write through the
//! gofer) is never followed or trusted by the host (REVIEW12 findings 1 and 2a): a
//! symlink planted as the checkpoint verdict does not make a pause read a host file, a
//! renamed socket with a symlink in its place does not lead the host into another
//! sandbox, and writes there (and to the agent's output, a host file) are bounded by
//! the sandbox's disk. Skipped where runsc is missing.

mod common;
mod gvisor_common;

use gvisor_common::*;
use sandboxd_runtime::{Runtime, SandboxSpec};

const SECRET: &str = "TOPSECRET-host-file-0600";

fn spec_with_disk(disk_mb: u32) -> SandboxSpec {
    SandboxSpec {
        disk_mb,
        ..common::spec("default")
    }
}

#[test]
fn a_symlink_planted_as_the_verdict_never_shows_a_host_file() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    // A root 0600 host file, at a path the sandbox makes too (the agent's own write of
    // its verdict follows the link inside the sandbox).
    let host = tempfile::tempdir().expect("host dir");
    let secret = host.path().join("secret");
    std::fs::write(&secret, format!("{SECRET}\n")).expect("write the secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let handle = rt.start(&spec_with_disk(64)).expect("start");
    let dir = host.path().display();
    // Planted again at once whenever the host removes it before asking for a verdict.
    let plant = format!(
        "mkdir -p {dir} && echo inside > {dir}/secret && cd /.sandboxd/run && \
         setsid sh -c 'while :; do [ -L quiesced ] || ln -s {dir}/secret quiesced 2>/dev/null; done' \
         >/dev/null 2>&1 < /dev/null & echo planted"
    );
    assert_eq!(
        common::agent_sh(&handle, &plant),
        (Some(0), "planted\n".into())
    );

    // The agent may win a race with the loop and write a real verdict (the pause then
    // goes through, legitimately): a few tries, each of which must keep the file secret.
    let mut handle = handle;
    for _ in 0..3 {
        match rt.checkpoint(&handle) {
            Ok(on_disk) => handle = rt.restore(&on_disk).expect("restore"),
            Err(e) => {
                let answer = e.to_string();
                assert!(
                    !answer.contains(SECRET),
                    "the pause showed the host file: {answer}"
                );
                assert!(rt.is_alive(&handle) && !rt.is_checkpointed(&handle));
            }
        }
    }
    let (code, out) = common::agent_sh(&handle, "echo still-here");
    assert_eq!((code, out.as_str()), (Some(0), "still-here\n"));
    rt.destroy(&handle).expect("destroy");
}

#[test]
fn a_renamed_socket_with_a_symlink_in_its_place_never_reaches_another_sandbox() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let attacker = rt.start(&spec_with_disk(64)).expect("start the attacker");
    let victim = rt.start(&spec_with_disk(64)).expect("start the victim");
    for (handle, who) in [(&attacker, "attacker"), (&victim, "victim")] {
        let (code, _) = common::agent_sh(handle, &format!("echo {who} > /root/who"));
        assert_eq!(code, Some(0));
    }
    let swap = format!(
        "cd /.sandboxd/run && mv agent.sock moved && ln -s {} agent.sock && echo swapped",
        victim.agent_socket.display()
    );
    assert_eq!(
        common::agent_sh(&attacker, &swap),
        (Some(0), "swapped\n".into())
    );
    // The attacker's calls on its own sandbox land in its own (or fail), never the
    // victim's: several, each on a new connection.
    for _ in 0..3 {
        if let Some(out) = who_answers(&attacker) {
            assert_eq!(
                out, "attacker\n",
                "the attacker's call ran in another sandbox"
            );
        }
    }
    // The victim is untouched and answers as itself.
    assert_eq!(
        common::agent_sh(&victim, "cat /root/who"),
        (Some(0), "victim\n".into())
    );
    rt.destroy(&attacker).expect("destroy the attacker");
    rt.destroy(&victim).expect("destroy the victim");
}

#[test]
fn writes_into_the_agent_dir_are_bounded_by_the_sandbox_disk() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&spec_with_disk(64)).expect("start");
    let (code, out) = common::agent_sh(
        &handle,
        "dd if=/dev/zero of=/.sandboxd/run/big bs=1M count=200 2>&1; \
         echo size=$(stat -c %s /.sandboxd/run/big)",
    );
    let size: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("size="))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no size in {out:?} ({code:?})"));
    assert!(
        size <= 64 << 20,
        "{size} bytes written outside the sandbox's 64 MiB disk: {out}"
    );
    // The sandbox still answers (its agent's socket is adopted already).
    let (code, out) = common::agent_sh(&handle, "rm /.sandboxd/run/big; echo ok");
    assert_eq!((code, out.as_str()), (Some(0), "ok\n"));
    rt.destroy(&handle).expect("destroy");
}

#[test]
fn writes_to_the_agents_output_are_bounded_by_the_sandbox_disk() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&spec_with_disk(64)).expect("start");
    // The agent's stdout is a host file; the sandbox's root reaches it as PID 1's fd.
    let (_, out) = common::agent_sh(
        &handle,
        "head -c 209715200 /dev/zero > /proc/1/fd/1; echo rc=$?",
    );
    let outside: u64 = walk_sizes(&handle.state_dir);
    assert!(
        outside < 16 << 20,
        "{outside} bytes of the sandbox's output outside its disk: {out}"
    );
    let (code, out) = common::agent_sh(&handle, "echo ok");
    assert_eq!((code, out.as_str()), (Some(0), "ok\n"));
    rt.destroy(&handle).expect("destroy");
}
