//! The escape suite: `escape-probe` runs inside a sandbox through the agent, the way user
//! commands run, and tries every way out; every attempt must be refused.

mod common;
mod serve_bin;

use common::{agent_sh, runtime, spec, wait_for, warm_runtime};
use sandboxd_agent_protocol::{AgentClient, ExecRequest};
use sandboxd_runtime::{Runtime, SandboxHandle};
use std::path::{Path, PathBuf};

/// Builds the probe into a target dir of its own (a nested cargo must not wait on the
/// lock the running test's cargo may hold) and returns the binary's path.
fn build_probe() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("escape-probe");
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "-p",
            "sandboxd-escape-probe",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build for the escape probe");
    assert!(status.success(), "building the escape probe failed");
    target.join("debug").join("escape-probe")
}

/// Uploads the probe with the agent's `write_file` and runs it with `exec`; returns stdout.
fn run_probe(handle: &SandboxHandle, probe: &Path, args: Vec<String>) -> String {
    use base64::Engine;
    use futures_util::StreamExt;
    let bytes = std::fs::read(probe).expect("read probe binary");
    let client = AgentClient::new(handle.agent_socket.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let body = futures_util::stream::once(async move { Ok(bytes::Bytes::from(bytes)) }).boxed();
    rt.block_on(client.write_file("/tmp/escape-probe", 0o755, body))
        .expect("upload probe");
    let mut argv = vec!["/tmp/escape-probe".to_owned()];
    argv.extend(args);
    let req = ExecRequest {
        argv,
        env: None,
        cwd: None,
        timeout_ms: 120_000,
        max_output_bytes: 1 << 20,
        user: None,
    };
    let result = rt.block_on(client.exec(&req)).expect("exec probe");
    let decode = |s: &str| {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(s)
            .expect("base64");
        String::from_utf8_lossy(&raw).into_owned()
    };
    assert_eq!(
        result.exit_code,
        Some(0),
        "probe failed: {}",
        decode(&result.stderr)
    );
    decode(&result.stdout)
}

/// Leaves the host's `/` open on fd 9 of this test process, inheritable, as a careless
/// parent of the server would: no sandbox may get it (or any other descriptor above 2).
fn inherit_root_on_fd_9() {
    let root = std::fs::File::open("/").expect("open /");
    // SAFETY: dup2 onto fd 9 (this test process uses none of its own there) without
    // O_CLOEXEC, as an inherited descriptor would be.
    let rc = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&root), 9) };
    assert_eq!(rc, 9, "dup2: {}", std::io::Error::last_os_error());
}

/// The strings a sandbox must not find in its own mount and socket tables: the host's
/// data dir (as given and resolved) and the sandboxes' ids.
fn host_strings(data: &Path, ids: &[uuid::Uuid]) -> Vec<String> {
    let mut out = vec!["--host-string".to_owned(), data.display().to_string()];
    if let Ok(real) = data.canonicalize() {
        out.extend(["--host-string".to_owned(), real.display().to_string()]);
    }
    for id in ids {
        out.extend(["--host-string".to_owned(), id.to_string()]);
    }
    out
}

#[test]
fn every_escape_attempt_from_inside_a_sandbox_is_refused() {
    inherit_root_on_fd_9();
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let escaped = attempt_escapes(&rt, data.path(), "", check_report);
    assert!(escaped.is_empty(), "escapes:\n{}", escaped.join("\n"));
}

/// The same attempts from a sandbox of the gVisor tier (skipped without runsc), against
/// a second gVisor sandbox: every one must be refused there too.
#[test]
fn every_escape_attempt_from_inside_a_gvisor_sandbox_is_refused() {
    use sandboxd_runtime::linux::gvisor::GvisorRuntime;
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    inherit_root_on_fd_9();
    let data = tempfile::tempdir().expect("tempdir");
    let rt = GvisorRuntime::new(sandboxd_runtime::linux::LinuxConfig {
        data_dir: data.path().to_path_buf(),
        init_exe: env!("CARGO_BIN_EXE_sandboxd").into(),
        init_args: vec!["__sandbox-init".into()],
        cgroup_parent: format!(
            "sandboxd-test-{}",
            data.path()
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("x")
                .trim_start_matches('.')
        ),
        max_ptys_per_sandbox: sandboxd_runtime::linux::DEFAULT_MAX_PTYS,
    })
    .expect("gvisor runtime");
    let escaped = attempt_escapes(&rt, data.path(), " (gVisor)", |report| {
        gvisor_differences(check_report(report))
    });
    rt.cgroups().remove_parent_if_unused();
    assert!(escaped.is_empty(), "escapes:\n{}", escaped.join("\n"));
}

/// Runs the escape probe in one sandbox of `rt` against a second one and the host (a
/// planted marker file, a loopback listener, the other sandbox's paths and socket);
/// returns what `judge` makes of the report. Both sandboxes are destroyed whatever
/// happens.
fn attempt_escapes(
    rt: &dyn Runtime,
    data: &Path,
    tier: &str,
    judge: impl Fn(&str) -> Vec<String> + std::panic::RefUnwindSafe,
) -> Vec<String> {
    let probe = build_probe();
    let a = rt.start(&spec("default")).expect("start a");
    let b = rt.start(&spec("default")).expect("start b");
    let marker =
        std::env::temp_dir().join(format!("sandboxd-escape-marker-{}", uuid::Uuid::new_v4()));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let result = std::panic::catch_unwind(|| {
        std::fs::write(&marker, "host secret").expect("plant marker");
        let other_file = format!("/tmp/b-only-{}", b.id);
        let (code, _) = agent_sh(&b, &format!("echo b > {other_file}"));
        assert_eq!(code, Some(0));
        let port = listener.local_addr().expect("addr").port();
        let args = [
            ("--host-pid", std::process::id().to_string()),
            ("--marker", marker.display().to_string()),
            ("--port", port.to_string()),
            ("--other-path", b.state_dir.display().to_string()),
            (
                "--other-path",
                b.state_dir.join("rootfs").display().to_string(),
            ),
            ("--other-socket", b.agent_socket.display().to_string()),
            ("--other-file", other_file),
        ];
        let mut args: Vec<String> = args
            .into_iter()
            .flat_map(|(f, v)| [f.to_owned(), v])
            .collect();
        args.extend(host_strings(data, &[a.id, b.id]));
        let report = run_probe(&a, &probe, args);
        println!("escape report{tier}:\n{report}");
        judge(&report)
    });
    std::fs::remove_file(&marker).ok();
    rt.destroy(&a).expect("destroy a");
    rt.destroy(&b).expect("destroy b");
    match result {
        Ok(escaped) => escaped,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The attempts that report differently under gVisor for a reason that is no way out,
/// each with the exact result expected there. Anything else that reports "escaped", or
/// one of these with another result, is returned as an escape.
const GVISOR_EXPECTED: &[(&str, &str)] = &[
    // Namespaces are the sentry's own (user-space) objects under gVisor: unsharing them
    // never reaches the host kernel's namespace code, the surface the container tier
    // forbids them for (its seccomp filter refuses them). runsc's own seccomp filter on
    // the sentry still confines the host side.
    ("unshare(CLONE_NEWUSER)", "succeeded"),
    ("clone(CLONE_NEWUSER)", "succeeded"),
    ("unshare(CLONE_NEWNS)", "succeeded"),
    // runsc 20240729's sentry also lets a user namespace's owner mount: the tmpfs is a
    // sentry object in the sentry's own mount namespace, no host mount.
    (
        "unshare(CLONE_NEWUSER | CLONE_NEWNS) then mount tmpfs",
        "succeeded",
    ),
    // runsc 20240729's sentry has a /proc/sysrq-trigger of its own (mode 0200, in its
    // own procfs: no host file behind it); the open succeeds, a write fails with EIO
    // and nothing reaches the host's SysRq (checked: `echo h` inside logs nothing on the
    // host).
    ("open /proc/sysrq-trigger for writing", "succeeded"),
    // This sentry's /proc/<pid>/status has no NoNewPrivs line; the flag itself is set
    // (the OCI spec asks for it, and prctl(PR_GET_NO_NEW_PRIVS) answers 1 inside).
    ("/proc/self/status NoNewPrivs is 1", "NoNewPrivs: missing"),
    // The setuid copy of the host's `id` does not run as nobody under this runsc (not an
    // escape: the probe calls it inconclusive); with no_new_privs set (above) a setuid
    // bit raises nothing either, and credentials are the sentry's, not the host's.
    (
        "run a setuid-root copy of id as nobody",
        "the copy did not run (test inconclusive)",
    ),
    // The sentry implements a uevent netlink socket of its own that never carries the
    // host's events (no host socket behind it).
    (
        "socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)",
        "opened as type 2",
    ),
];

/// `escaped` (JSON lines) less the differences [`GVISOR_EXPECTED`] explains.
fn gvisor_differences(escaped: Vec<String>) -> Vec<String> {
    escaped
        .into_iter()
        .filter(|line| {
            let a: serde_json::Value = serde_json::from_str(line).expect("attempt");
            !GVISOR_EXPECTED
                .iter()
                .any(|(what, result)| a["attempt"] == *what && a["result"] == *result)
        })
        .collect()
}

/// A sandbox started from a warm init (made before its sandbox was known, under a
/// `.warm-<key>` dir) shows as little of the host as a cold one, and holds no more
/// descriptors.
#[test]
fn a_warm_started_sandbox_shows_nothing_of_the_host_either() {
    inherit_root_on_fd_9();
    let probe = build_probe();
    let data = tempfile::tempdir().expect("tempdir");
    let rt = warm_runtime(data.path(), 1);
    rt.fill_warm_inits(0, false);
    wait_for("a warm init ready", || rt.warm_inits_ready() >= 1);
    let warm_keys: Vec<String> = std::fs::read_dir(data.path().join("sandboxes"))
        .expect("sandboxes dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_prefix(".warm-").map(str::to_owned))
        .collect();
    assert!(!warm_keys.is_empty(), "no warm entry on disk");
    let a = rt.start(&spec("default")).expect("start from a warm init");
    let result = std::panic::catch_unwind(|| {
        let mut args = host_strings(data.path(), &[a.id]);
        for key in &warm_keys {
            args.extend(["--host-string".to_owned(), key.clone()]);
        }
        let report = run_probe(&a, &probe, args);
        println!("escape report:\n{report}");
        escaped(&report)
    });
    rt.destroy(&a).expect("destroy");
    match result {
        Ok(escaped) => assert!(escaped.is_empty(), "escapes:\n{}", escaped.join("\n")),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The attempts of a report that escaped.
fn escaped(report: &str) -> Vec<String> {
    report
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("report line"))
        .filter(|a| a["escaped"] != serde_json::Value::Bool(false))
        .map(|a| a.to_string())
        .collect()
}

/// Parses the probe's JSON lines; returns the attempts that escaped (none must).
fn check_report(report: &str) -> Vec<String> {
    let attempts: Vec<serde_json::Value> = report
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad report line {l:?}: {e}")))
        .collect();
    // Every category of the suite ran (the probe skips none when given every target).
    let names: Vec<&str> = attempts
        .iter()
        .filter_map(|a| a["attempt"].as_str())
        .collect();
    for needle in [
        "host process",
        "host marker",
        "/usr/bin",
        "mount",
        "fsopen",
        "open_tree",
        "CLONE_NEWUSER",
        "ptrace",
        "init_module",
        "kexec",
        "bpf",
        "/dev/mem",
        "mknod",
        "sethostname",
        "settimeofday",
        "clock_settime",
        "/proc/sys",
        "/sys/",
        "127.0.0.1",
        "another sandbox's file",
        "another sandbox's agent socket",
        "another sandbox over the network",
        "setuid",
        "NoNewPrivs",
        "descriptor above 2",
        "host paths or ids in /proc/self/mountinfo",
        "host paths or ids in /proc/net/unix",
        "socket(AF_VSOCK)",
        "socket(AF_XDP)",
        "socket(AF_PACKET)",
        "NETLINK_NETFILTER",
    ] {
        assert!(
            names.iter().any(|n| n.contains(needle)),
            "no attempt covers {needle:?}"
        );
    }
    assert!(attempts.len() >= 40, "only {} attempts ran", attempts.len());
    attempts
        .iter()
        .filter(|a| a["escaped"] != serde_json::Value::Bool(false))
        .map(|a| a.to_string())
        .collect()
}

/// Run by python3 inside a sandbox: the descriptors above 2 still open once the
/// listing's own is closed, whether the host's `/` is reachable through fd 9, and
/// whether the mount and socket tables name the string in argv[1].
const FD_SCRIPT: &str = r#"
import os, sys
fds = [int(f) for f in os.listdir("/proc/self/fd")]
held = ["%d->%s" % (f, os.readlink("/proc/self/fd/%d" % f)) for f in fds
        if f > 2 and os.path.exists("/proc/self/fd/%d" % f)]
print("held", held)
try:
    open("/proc/self/fd/9/etc/hostname").read()
    print("host root: reachable")
except OSError as e:
    print("host root: refused", e.errno)
for view in ["/proc/self/mountinfo", "/proc/net/unix"]:
    print(view, "names the data dir" if sys.argv[1] in open(view).read() else "clean")
"#;

/// What [`FD_SCRIPT`] prints when nothing leaked.
fn assert_clean(out: &str) {
    let expected =
        "held []\nhost root: refused 2\n/proc/self/mountinfo clean\n/proc/net/unix clean\n";
    assert_eq!(out, expected, "the sandbox holds or sees what it must not");
}

/// Gives `cmd` the host's `/` on fd 9, inheritable, the way `cmd 9</` would.
fn with_root_on_fd_9(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let root = std::fs::File::open("/").expect("open /");
    // SAFETY: dup2 only (async-signal-safe) between fork and exec; `root` stays open
    // in the parent until the command is spawned (the closure owns it).
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&root), 9) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn sandboxd_run_passes_no_inherited_descriptor_into_the_sandbox() {
    let data = tempfile::tempdir().expect("tempdir");
    let mut cmd = std::process::Command::new(serve_bin::BIN);
    cmd.args(["run", "--network", "none", "--data-dir"])
        .arg(data.path())
        .args(["--", "/usr/bin/python3", "-c", FD_SCRIPT])
        .arg(data.path())
        .env_remove("SANDBOXD_DATA_DIR")
        .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
        .stdin(std::process::Stdio::null());
    with_root_on_fd_9(&mut cmd);
    let out = cmd.output().expect("run sandboxd run");
    // The run's teardown goes on after it returns: over before the data dir goes.
    serve_bin::wait_for_runs(data.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sandboxd run failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_clean(&stdout);
}

#[test]
fn a_server_started_with_an_extra_descriptor_passes_it_to_no_sandbox() {
    let data = tempfile::tempdir().expect("tempdir");
    let key = "escape-fd-master";
    let env = [("SANDBOXD_NETWORK", "none"), ("SANDBOXD_WARM_INITS", "1")];
    let server = serve_bin::Server::start_with(data.path(), Some(key), &env, with_root_on_fd_9);
    // The first create may take the warm init, the second starts cold or from the refill:
    // both kinds of start are looked at.
    let ids: Vec<String> = (0..2)
        .map(|n| {
            let body = serde_json::json!({"name": format!("fds-{n}"), "vcpu": 1, "memoryMb": 128});
            server.create_sandbox(key, &body)
        })
        .collect();
    let data_dir = data.path().display().to_string();
    let outs: Vec<(i64, String)> = ids
        .iter()
        .map(|id| server.exec(key, id, &["/usr/bin/python3", "-c", FD_SCRIPT, &data_dir]))
        .collect();
    for id in &ids {
        server.destroy(key, id);
    }
    for (code, out) in outs {
        assert_eq!(code, 0, "{out}");
        assert_clean(&out);
    }
}
