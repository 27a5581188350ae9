//! The escape suite: `escape-probe` runs inside a sandbox through the agent, the way user
//! commands run, and tries every way out; every attempt must be refused.

mod common;

use common::{agent_sh, runtime, spec};
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

#[test]
fn every_escape_attempt_from_inside_a_sandbox_is_refused() {
    let probe = build_probe();
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
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
        let args = args
            .into_iter()
            .flat_map(|(f, v)| [f.to_owned(), v])
            .collect();
        let report = run_probe(&a, &probe, args);
        println!("escape report:\n{report}");
        check_report(&report)
    });
    std::fs::remove_file(&marker).ok();
    rt.destroy(&a).expect("destroy a");
    rt.destroy(&b).expect("destroy b");
    match result {
        Ok(escaped) => assert!(escaped.is_empty(), "escapes:\n{}", escaped.join("\n")),
        Err(panic) => std::panic::resume_unwind(panic),
    }
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
