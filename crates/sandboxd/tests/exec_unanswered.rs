//! The host side of an exec has a time limit of its own: a sandbox that cannot answer
//! (frozen here, by hand) gets the dialect's timeout error a margin after the command's
//! timeout, not a request held forever; the command, once the sandbox runs again, is
//! ended by the agent's own timeout.

mod freezer;
mod serve_bin;

use freezer::{set_frozen, thaw};
use serde_json::json;
use serve_bin::Server;
use std::time::Duration;

const MASTER: &str = "exec-unanswered-test-master-key-0123456789";

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
    thaw(&id);
    server.destroy(MASTER, &id);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
