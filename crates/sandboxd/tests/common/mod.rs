//! Shared helpers for the Linux backend's integration tests (they run as root).

#![allow(dead_code)]

use sandboxd_runtime::linux::{LinuxConfig, LinuxRuntime};
use sandboxd_runtime::{Runtime, SandboxHandle, SandboxSpec};
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use uuid::Uuid;

/// A backend over a fresh data dir, starting the real `sandboxd` binary as init.
pub fn runtime(data_dir: &Path) -> LinuxRuntime {
    LinuxRuntime::new(LinuxConfig {
        data_dir: data_dir.to_path_buf(),
        init_exe: env!("CARGO_BIN_EXE_sandboxd").into(),
        init_args: vec!["__sandbox-init".into()],
        cgroup_parent: "sandboxd-test".into(),
    })
    .expect("linux runtime")
}

pub fn spec(image: &str) -> SandboxSpec {
    SandboxSpec { id: Uuid::new_v4(), image: image.into(), extra_layers: vec![], hostname: "box".into(), vcpu: 1, memory_mb: 256, pids_max: 128 }
}

/// `GET path` over the agent's Unix socket; returns the response body.
pub fn get(socket: &Path, path: &str) -> String {
    let mut conn = std::os::unix::net::UnixStream::connect(socket).expect("connect agent");
    write!(conn, "GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n").expect("send request");
    let mut response = String::new();
    conn.read_to_string(&mut response).expect("read response");
    assert!(response.starts_with("HTTP/1.1 200"), "unexpected response {response:?}");
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}

/// Runs `script` with bash as root inside the sandbox (entering its namespaces and root).
pub fn sh(handle: &SandboxHandle, script: &str) -> std::process::Output {
    Command::new("nsenter")
        .args(["-t", &handle.agent_pid.to_string(), "-U", "-m", "-u", "-i", "-n", "-p", "-r", "-w", "--", "/bin/bash", "-c", script])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("nsenter")
}

/// Stdout of a script that must succeed inside the sandbox.
pub fn sh_ok(handle: &SandboxHandle, script: &str) -> String {
    let out = sh(handle, script);
    assert!(out.status.success(), "{script:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Mount points at or below `dir` in our mount namespace.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let prefix = dir.display().to_string();
    info.lines().filter_map(|l| l.split(' ').nth(4)).filter(|m| m.starts_with(&prefix)).map(String::from).collect()
}

/// Asserts that nothing of sandbox `id` is left: process, cgroup, mount, directory, slot.
pub fn assert_gone(rt: &LinuxRuntime, data_dir: &Path, handle: &SandboxHandle) {
    assert!(!rt.is_alive(handle), "agent still alive");
    if handle.agent_pid > 0 {
        assert!(!Path::new(&format!("/proc/{}", handle.agent_pid)).exists() || !rt.is_alive(handle));
    }
    for dir in rt.cgroups().dirs(handle.id) {
        assert!(!dir.exists(), "cgroup {} left behind", dir.display());
    }
    assert_eq!(mounts_under(&handle.state_dir), Vec::<String>::new());
    assert!(!handle.state_dir.exists(), "state dir left behind");
    let slot_owners: Vec<String> = std::fs::read_dir(data_dir.join("slots")).expect("slots").filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok()).collect();
    assert!(!slot_owners.contains(&handle.id.to_string()), "id slot left claimed");
}

/// Runs `script` with `sh -c` through the agent's exec endpoint; returns (exit, stdout).
pub fn agent_sh(handle: &SandboxHandle, script: &str) -> (Option<i32>, String) {
    use base64::Engine;
    let client = sandboxd_agent_protocol::AgentClient::new(handle.agent_socket.clone());
    let req = sandboxd_agent_protocol::ExecRequest {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: None,
        cwd: None,
        timeout_ms: 60_000,
        max_output_bytes: 1 << 20,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    let result = rt.block_on(client.exec(&req)).expect("agent exec");
    let stdout = base64::engine::general_purpose::STANDARD.decode(result.stdout).expect("base64");
    (result.exit_code, String::from_utf8_lossy(&stdout).into_owned())
}
