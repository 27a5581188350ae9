//! Every agent call has a host-side bound, not only the one-shot exec: with the
//! sandbox's agent stopped (SIGSTOP from the host, a hung agent), a file read and a
//! process list answer the dialect's `unavailable` error after the configured bound
//! (`SANDBOXD_AGENT_ANSWER_SECONDS`) instead of holding the request; once the agent
//! runs again the sandbox works as before.

mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::path::Path;
use std::time::Duration;

const MASTER: &str = "agent-unanswered-test-master-key-0123456789";

/// The agent's host PID, from the sandbox's handle file.
fn agent_pid(data: &Path, id: &str) -> String {
    let file = data.join("sandboxes").join(id).join("handle.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    let handle: serde_json::Value = serde_json::from_str(&text).expect("handle json");
    handle["agent_pid"].as_u64().expect("agent_pid").to_string()
}

fn signal(pid: &str, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, pid])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// GETs `path` from another thread; the answer, or `None` when none came in two
/// minutes (far past the 2 s bound: only a request held forever misses it).
fn get_within_two_minutes(server: &Server, path: &str) -> Option<(u16, String)> {
    let (addr, path) = (server.addr, path.to_owned());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let headers = [("authorization", format!("Bearer {MASTER}"))];
        if let Ok(reply) = serve_bin::try_http(addr, "GET", &path, &headers, "") {
            let _ = tx.send((reply.status, reply.text()));
        }
    });
    rx.recv_timeout(Duration::from_secs(120)).ok()
}

#[test]
fn file_reads_and_process_lists_of_a_stopped_agent_end_unavailable() {
    let data_tmp = tempfile::tempdir().expect("tempdir");
    let data = data_tmp.path().canonicalize().expect("canonical");
    let server = Server::start_with_env(
        &data,
        Some(MASTER),
        &[("SANDBOXD_AGENT_ANSWER_SECONDS", "2")],
    );
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "stopped", "vcpu": 1, "memoryMb": 128}),
    );
    let pid = agent_pid(&data, &id);
    signal(&pid, "-STOP");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let file = format!("/v2/sandboxes/{id}/files?path=/etc/hostname");
        for path in [file.clone(), format!("/v2/sandboxes/{id}/processes")] {
            let answer = get_within_two_minutes(&server, &path);
            let (status, body) = answer.unwrap_or_else(|| panic!("no answer to {path}"));
            assert_eq!(status, 503, "{path}: {body}");
            assert!(body.contains("did not answer"), "{path}: {body}");
        }
        signal(&pid, "-CONT");
        let (status, _) = get_within_two_minutes(&server, &file).expect("answer once running");
        assert_eq!(status, 200);
        let (code, out) = server.exec(MASTER, &id, &["/bin/echo", "again"]);
        assert_eq!((code, out.trim()), (0, "again"));
    }));
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status();
    server.destroy(MASTER, &id);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
