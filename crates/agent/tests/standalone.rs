//! The agent as its own process via `run_blocking` (this test binary re-executes itself
//! as the agent): idle memory, and reaping of orphans re-parented to it.

use sandboxd_agent::AgentConfig;
use sandboxd_agent_protocol::{AgentClient, ExecRequest};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "SANDBOXD_AGENT_TEST_SOCKET";

/// Entry point of the re-executed child: become a subreaper (as PID 1 is) and serve.
#[test]
fn agent_child_entry() {
    let Ok(socket) = std::env::var(CHILD_ENV) else {
        return;
    };
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let listener = std::os::unix::net::UnixListener::bind(socket).expect("bind");
    sandboxd_agent::run_blocking(listener, AgentConfig::default());
}

struct AgentProcess(Child);

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_agent(dir: &std::path::Path) -> (AgentProcess, AgentClient) {
    let socket = dir.join("agent.sock");
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "agent_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &socket)
        .spawn()
        .expect("spawn agent");
    (AgentProcess(child), AgentClient::new(socket))
}

async fn until_healthy(c: &AgentClient) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.health().await.is_err() {
        assert!(Instant::now() < deadline, "agent never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Children of `pid` that are zombies.
fn zombie_children(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            let rest: Vec<&str> = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            rest.first() == Some(&"Z") && rest.get(1) == Some(&pid.to_string().as_str())
        })
        .count()
}

#[tokio::test]
async fn standalone_agent_is_small_and_reaps_orphans() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (agent, client) = spawn_agent(dir.path());
    until_healthy(&client).await;
    let pid = agent.0.id();
    assert_eq!(client.health().await.unwrap().pid, pid);

    // Orphans: the shell exits at once, leaving background children to the agent.
    let req = ExecRequest {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "for i in 1 2 3 4 5; do /bin/true & done; exit 0".into(),
        ],
        env: None,
        cwd: None,
        timeout_ms: 0,
        max_output_bytes: 0,
        user: None,
    };
    assert_eq!(client.exec(&req).await.unwrap().exit_code, Some(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    while zombie_children(pid) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(zombie_children(pid), 0, "orphans were left as zombies");

    let rss = status_kib(pid, "VmRSS:");
    eprintln!("idle standalone agent (debug test binary): VmRSS {rss} KiB");
    assert!(rss < 32 * 1024, "idle agent uses {rss} KiB");
}

/// The names of `pid`'s threads.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .collect()
}

/// The child reaper runs before the first command, so that the first command (a warm
/// sandbox's first exec) does not pay for starting it.
#[tokio::test]
async fn the_reaper_runs_before_the_first_command() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (agent, client) = spawn_agent(dir.path());
    until_healthy(&client).await;
    let names = thread_names(agent.0.id());
    assert!(
        names.iter().any(|n| n == "agent-reaper"),
        "no reaper thread before any command: {names:?}"
    );
}
