//! One helper that starts a real agent on a temp Unix socket, plus small test utilities.
#![allow(dead_code)]

use base64::Engine as _;
use futures_util::StreamExt;
use sandboxd_agent::AgentConfig;
use sandboxd_agent_protocol::{
    AgentClient, AgentErrorCode, ClientError, Frame, StartProcess, StreamKind,
};
use std::time::{Duration, Instant};
use uuid::Uuid;

pub struct TestAgent {
    pub client: AgentClient,
    pub dir: tempfile::TempDir,
}

/// Starts an agent with `config` on the current runtime, bound to a fresh socket.
pub async fn start_with(config: AgentConfig) -> TestAgent {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("agent.sock");
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
    tokio::spawn(sandboxd_agent::serve(listener, config));
    TestAgent {
        client: AgentClient::new(socket),
        dir,
    }
}

pub async fn start() -> TestAgent {
    start_with(AgentConfig::default()).await
}

pub fn process(argv: &[&str]) -> StartProcess {
    StartProcess {
        id: Uuid::new_v4(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: None,
        cwd: None,
        hold_output: false,
        user: None,
    }
}

pub fn sh(script: &str) -> StartProcess {
    process(&["/bin/sh", "-c", script])
}

pub fn decode(data: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .expect("base64")
}

/// The error code of a failed call.
pub fn code<T>(r: Result<T, ClientError>) -> AgentErrorCode {
    match r {
        Err(ClientError::Agent(e)) => e.code,
        Err(other) => panic!("expected an agent error, got {other:?}"),
        Ok(_) => panic!("expected an agent error, got success"),
    }
}

/// The `Log` frames of a non-following output request, as (stream, bytes).
pub async fn chunks(client: &AgentClient, id: Uuid, tail: u64) -> Vec<(StreamKind, Vec<u8>)> {
    let mut s = client.output(id, tail, false).await.expect("output");
    let mut out = Vec::new();
    while let Some(frame) = s.next().await {
        if let Frame::Log { stream, data, .. } = frame.expect("frame") {
            out.push((stream, decode(&data)));
        }
    }
    out
}

/// Waits (up to a generous bound) until `pid` no longer exists or is a zombie.
pub async fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) => {
                let state = stat
                    .rsplit(')')
                    .next()
                    .and_then(|s| s.split_whitespace().next());
                if state == Some("Z") || state == Some("X") {
                    return true;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// SIGKILLs a process by PID (cleanup of what a test started).
pub fn kill(pid: i32) {
    // SAFETY: kill(2) on a PID this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// A shell loop that waits for `path` to exist (the test creates it when the command may
/// go on), at most about a minute: a test that fails before it creates the file leaves
/// no command looping for ever.
pub fn wait_for_file(path: &std::path::Path) -> String {
    format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done",
        path.display()
    )
}
