//! The host side of an exec has a time limit of its own: a sandbox that cannot answer
//! (frozen here, by hand) gets the dialect's timeout error a margin after the command's
//! timeout, not a request held forever; the command, once the sandbox runs again, is
//! ended by the agent's own timeout.

mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MASTER: &str = "exec-unanswered-test-master-key-0123456789";

/// The sandbox's freezer state file (cgroup v1 `freezer.state`, v2 `cgroup.freeze`).
fn freezer_file(id: &str) -> PathBuf {
    let v1 = Path::new("/sys/fs/cgroup/freezer/sandboxd").join(id);
    match v1.is_dir() {
        true => v1.join("freezer.state"),
        false => Path::new("/sys/fs/cgroup/sandboxd")
            .join(id)
            .join("cgroup.freeze"),
    }
}

fn set_frozen(id: &str, frozen: bool) {
    let file = freezer_file(id);
    let value = match (file.ends_with("freezer.state"), frozen) {
        (true, true) => "FROZEN",
        (true, false) => "THAWED",
        (false, true) => "1",
        (false, false) => "0",
    };
    std::fs::write(&file, value).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
}

/// POSTs `body` to `path` from another thread; the answer, or `None` when none came in
/// two minutes (far past the limit: only a request held forever misses it).
fn post_within_two_minutes(
    server: &Server,
    path: &str,
    body: serde_json::Value,
) -> Option<(u16, String)> {
    let (addr, path) = (server.addr, path.to_owned());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let headers = [
            ("authorization", format!("Bearer {MASTER}")),
            ("content-type", "application/json".to_owned()),
        ];
        if let Ok(reply) = serve_bin::try_http(addr, "POST", &path, &headers, &body.to_string()) {
            let _ = tx.send((reply.status, reply.text()));
        }
    });
    rx.recv_timeout(Duration::from_secs(120)).ok()
}

#[test]
fn an_exec_in_a_frozen_sandbox_ends_as_a_timeout_and_its_command_does_not_run_on() {
    let data_tmp = tempfile::tempdir().expect("tempdir");
    let data = data_tmp.path().canonicalize().expect("canonical");
    let server = Server::start(&data, Some(MASTER));
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "frozen", "vcpu": 1, "memoryMb": 128}),
    );
    set_frozen(&id, true);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let exec = format!("/v2/sandboxes/{id}/exec");
        let late = json!({"command": ["/bin/sh", "-c", "sleep 3; touch /late"], "timeout": "1s"});
        let answer = post_within_two_minutes(&server, &exec, late);
        let (status, body) = answer.expect("no answer to an exec of a frozen sandbox");
        assert_eq!(status, 504, "{body}");
        assert!(body.contains("sandbox_exec_timed_out"), "{body}");
        set_frozen(&id, false);
        // Running again: the agent may get the request now, and ends it at its timeout.
        let (code, out) = server.exec(
            MASTER,
            &id,
            &[
                "/bin/sh",
                "-c",
                "sleep 4; test -e /late && echo late || echo none",
            ],
        );
        assert_eq!((code, out.trim()), (0, "none"));
    }));
    let _ = std::fs::write(freezer_file(&id), "THAWED");
    let _ = std::fs::write(freezer_file(&id), "0");
    server.destroy(MASTER, &id);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
