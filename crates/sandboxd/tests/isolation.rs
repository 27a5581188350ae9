//! Isolation asserted from inside a sandbox, through the agent, the way user commands run.

mod common;

use common::{agent_sh, runtime, spec};
use sandboxd_runtime::Runtime;

/// Runs a Python snippet inside the sandbox and returns its stdout, trimmed.
fn py(handle: &sandboxd_runtime::SandboxHandle, code: &str) -> String {
    let script = format!("/usr/bin/python3 -c '{}'", code.replace('\'', "'\\''"));
    let (code, out) = agent_sh(handle, &script);
    assert_eq!(code, Some(0), "python failed: {out}");
    out.trim().to_owned()
}

/// A raw syscall from inside the sandbox; returns "ret errno".
fn syscall(handle: &sandboxd_runtime::SandboxHandle, nr: i64, args: &str) -> String {
    py(
        handle,
        &format!(
            "import ctypes; l=ctypes.CDLL(None, use_errno=True); l.syscall.restype=ctypes.c_long; \
             r=l.syscall({nr}, {args}); print(r, ctypes.get_errno())"
        ),
    )
}

#[test]
fn sandbox_is_isolated_from_the_host_and_other_sandboxes() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let a = rt.start(&spec("default")).expect("start a");
    let b = rt.start(&spec("default")).expect("start b");
    let result = std::panic::catch_unwind(|| {
        // Only its own processes: PID 1 is the agent and the host's PIDs are absent.
        let (_, pids) = agent_sh(
            &a,
            "ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/1/comm",
        );
        let mut lines = pids.lines();
        let count: u32 = lines.next().unwrap_or("0").trim().parse().expect("count");
        assert!(count <= 6, "sandbox sees {count} processes");
        let host_pid = std::process::id();
        let (_, seen) = agent_sh(
            &a,
            &format!("cat /proc/{host_pid}/cmdline 2>/dev/null | tr '\\0' ' '"),
        );
        assert!(!seen.contains("isolation"), "host process visible: {seen}");

        // A host file outside the image is invisible.
        let marker = std::env::temp_dir().join(format!("sandboxd-marker-{}", uuid::Uuid::new_v4()));
        std::fs::write(&marker, "secret").expect("marker");
        let (code, _) = agent_sh(&a, &format!("cat {}", marker.display()));
        std::fs::remove_file(&marker).ok();
        assert_ne!(code, Some(0), "host marker readable inside");
        let (_, found) = agent_sh(&a, "ls /work /root/.cargo /etc/shadow 2>&1 | head -3");
        assert!(
            found.contains("No such file"),
            "host paths visible: {found}"
        );

        // Read-only image paths refuse writes, /etc is writable by root.
        let (code, _) = agent_sh(&a, "echo x > /usr/bin/sandboxd-probe");
        assert_ne!(code, Some(0), "wrote into read-only /usr");
        let (code, out) = agent_sh(
            &a,
            "echo ok > /etc/probe && cat /etc/probe && stat -c %U /etc/probe",
        );
        assert_eq!((code, out.as_str()), (Some(0), "ok\nroot\n"));

        // Root inside, unprivileged outside.
        let (_, id) = agent_sh(&a, "id -u");
        assert_eq!(id.trim(), "0");
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", a.agent_pid)).expect("status");
        let uid_line = status.lines().find(|l| l.starts_with("Uid:")).expect("Uid");
        let host_uid: u32 = uid_line
            .split_whitespace()
            .nth(1)
            .expect("uid")
            .parse()
            .expect("uid");
        assert!(host_uid >= 65536, "agent runs as host uid {host_uid}");
        assert_eq!(host_uid, a.host_id_base);

        // Privileged operations fail.
        let (code, out) = agent_sh(&a, "mount -t tmpfs none /mnt 2>&1");
        assert_ne!(code, Some(0), "mount succeeded: {out}");
        let (code, out) = agent_sh(&a, "unshare -U true 2>&1");
        assert_ne!(code, Some(0), "unshare -U succeeded: {out}");
        let (code, out) = agent_sh(&a, "unshare -r -m true 2>&1");
        assert_ne!(code, Some(0), "unshare -r succeeded: {out}");
        if cfg!(target_arch = "x86_64") {
            // kexec_load(246), bpf(321), init_module(175), finit_module(313): all -1.
            for (nr, args) in [
                (246, "0,0,0,0"),
                (321, "0,0,0"),
                (175, "0,0,0"),
                (313, "0,0,0"),
            ] {
                let got = syscall(&a, nr, args);
                assert!(got.starts_with("-1 "), "syscall {nr} returned {got}");
            }
        }
        let (code, _) = agent_sh(&a, "echo 1 > /proc/sys/kernel/sysrq");
        assert_ne!(code, Some(0), "wrote /proc/sys");
        let (code, _) = agent_sh(&a, "hostname evil");
        assert_ne!(code, Some(0), "changed hostname");

        // Host loopback services are unreachable.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let port = listener.local_addr().expect("addr").port();
        let got = py(
            &a,
            &format!(
                "import socket; s=socket.socket(); s.settimeout(2)\n\
                 try:\n  s.connect((\"127.0.0.1\", {port})); print(\"connected\")\n\
                 except OSError as e: print(\"refused\", e.errno)"
            ),
        );
        assert!(got.starts_with("refused"), "reached host loopback: {got}");
        let (_, links) = agent_sh(&a, "ls /sys/class/net");
        assert_eq!(links.trim(), "lo", "unexpected interfaces");

        // A second sandbox does not see the first's files.
        agent_sh(&a, "echo mine > /tmp/a-only && echo mine > /root/a-only");
        let (code, _) = agent_sh(&b, "cat /tmp/a-only || cat /root/a-only");
        assert_ne!(code, Some(0), "second sandbox sees the first's files");
        assert_ne!(
            a.host_id_base, b.host_id_base,
            "sandboxes share a host id range"
        );
    });
    rt.destroy(&a).expect("destroy a");
    rt.destroy(&b).expect("destroy b");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
