//! A server killed (-9) in the middle of a filesystem snapshot, while the sandbox is
//! frozen for the copy: the next start thaws the sandbox (its record still says
//! RUNNING, and an exec answers) and removes the snapshot's scratch dir.

mod common;
mod freezer;
mod serve_bin;

use freezer::{is_frozen, thaw};
use serde_json::json;
use serve_bin::Server;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MASTER: &str = "snapshot-killed-test-master-key-0123456789";

/// The snapshot scratch dirs in the layer store (`layers/.tmp-<uuid>`).
fn scratch_dirs(data: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data.join("layers"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix(".tmp-"))
                        .is_some_and(|id| uuid::Uuid::try_parse(id).is_ok())
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// `exec` of `/bin/echo alive` from another thread; its answer, or `None` when none came
/// in a minute (a frozen sandbox never answers).
fn exec_within_a_minute(server: &Server, id: &str) -> Option<(u16, String)> {
    let (addr, path) = (server.addr, format!("/v2/sandboxes/{id}/exec"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let body = json!({"command": ["/bin/echo", "alive"], "timeout": "5s"}).to_string();
        let headers = [
            ("authorization", format!("Bearer {MASTER}")),
            ("content-type", "application/json".to_owned()),
        ];
        if let Ok(reply) = serve_bin::try_http(addr, "POST", &path, &headers, &body) {
            let _ = tx.send((reply.status, reply.text()));
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).ok()
}

#[test]
fn a_server_killed_mid_snapshot_leaves_no_frozen_sandbox_nor_scratch_after_its_restart() {
    killed_mid_snapshot(&[], true);
}

/// On gVisor a snapshot of a sandbox that can be checkpointed captures its layer while
/// it is on disk (the kill leaves it there: the next exec wakes it).
#[test]
fn a_gvisor_server_killed_mid_snapshot_leaves_a_working_sandbox_and_no_scratch() {
    if !sandboxd_runtime::linux::gvisor::GvisorRuntime::available() {
        assert!(
            std::env::var_os("SANDBOXD_CI").is_none(),
            "runsc is missing"
        );
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let gvisor = [
        ("SANDBOXD_ISOLATION", "gvisor"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    killed_mid_snapshot(&gvisor, false);
}

/// Kills a server (with `env`) held at `capture.copied` in a snapshot, restarts it, and
/// checks the sandbox answers and no scratch is left; `frozen`: the tier freezes the
/// sandbox's cgroup for the copy (the container tier; its record stays RUNNING).
fn killed_mid_snapshot(env: &[(&str, &str)], frozen: bool) {
    let data_tmp = tempfile::tempdir().expect("tempdir");
    let data = data_tmp.path().canonicalize().expect("canonical");
    // The capture waits (copy done, frozen if the tier freezes) until the kill.
    let mut held = vec![("SANDBOXD_FAILPOINTS", "capture.copied=sleep(120000)")];
    held.extend_from_slice(env);
    let server = Server::start_with_env(&data, Some(MASTER), &held);
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "ksnap", "vcpu": 1, "memoryMb": 128}),
    );
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (code, _) = server.exec(MASTER, &id, &["/bin/sh", "-c", "echo data > /marker; sync"]);
        assert_eq!(code, 0);
        let (addr, path) = (server.addr, format!("/v2/sandboxes/{id}/snapshots"));
        let snapshot = std::thread::spawn(move || {
            let headers = [
                ("authorization", format!("Bearer {MASTER}")),
                ("content-type", "application/json".to_owned()),
            ];
            // Cut short by the kill.
            let _ = serve_bin::try_http(addr, "POST", &path, &headers, r#"{"name":"k1"}"#);
        });
        common::wait_for("the capture frozen with its copy made", || {
            (!frozen || is_frozen(&id))
                && scratch_dirs(&data)
                    .iter()
                    .any(|d| d.join("marker").exists())
        });
        server.kill9();
        snapshot.join().expect("the snapshot request");
        assert!(
            !frozen || is_frozen(&id),
            "the kill left the sandbox frozen (the setting of this test)"
        );
        assert_eq!(scratch_dirs(&data).len(), 1, "the kill left the scratch");

        let server = Server::start_with_env(&data, Some(MASTER), env);
        let got = server.request("GET", &format!("/v2/sandboxes/{id}"), MASTER, None);
        if frozen {
            assert_eq!(got.json()["data"]["status"], "RUNNING", "{}", got.text());
        }
        let answer = exec_within_a_minute(&server, &id);
        assert!(
            !is_frozen(&id),
            "the restarted server left the sandbox frozen"
        );
        let (status, body) = answer.expect("no answer to an exec in a minute");
        assert_eq!(status, 200, "{body}");
        assert_eq!(scratch_dirs(&data), Vec::<PathBuf>::new(), "scratch left");
        server
    }));
    // Whatever happened: thaw by hand, then a server ends the sandbox.
    thaw(&id);
    let server = match outcome {
        Ok(server) => server,
        Err(panic) => {
            let server = Server::start_with_env(&data, Some(MASTER), env);
            let _ = server.try_request("DELETE", &format!("/v2/sandboxes/{id}"), MASTER, None);
            drop(server);
            std::panic::resume_unwind(panic);
        }
    };
    server.destroy(MASTER, &id);
}

/// A snapshot whose freeze fails (fault point `snapshot.freeze`, hit once the freezer
/// was written) is refused and leaves its RUNNING sandbox thawed: an exec answers, and
/// a later snapshot works.
#[test]
fn a_snapshot_whose_freeze_fails_leaves_the_sandbox_running() {
    let data_tmp = tempfile::tempdir().expect("tempdir");
    let data = data_tmp.path().canonicalize().expect("canonical");
    let env = [
        ("SANDBOXD_FAILPOINTS", "snapshot.freeze=1*return"),
        ("SANDBOXD_NETWORK", "none"),
        ("SANDBOXD_AGENT_ANSWER_SECONDS", "2"),
    ];
    let server = Server::start_with_env(&data, Some(MASTER), &env);
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "fsnap", "vcpu": 1, "memoryMb": 128}),
    );
    let refused = server.request(
        "POST",
        &format!("/v2/sandboxes/{id}/snapshots"),
        MASTER,
        Some(&json!({"name": "f1"})),
    );
    assert!(
        refused.status >= 500,
        "the failed freeze fails the snapshot: {} {}",
        refused.status,
        refused.text()
    );
    assert!(
        !is_frozen(&id),
        "the failed snapshot left the sandbox frozen"
    );
    let answer = exec_within_a_minute(&server, &id);
    assert_eq!(
        answer.as_ref().map(|a| a.0),
        Some(200),
        "an exec after the failed snapshot: {answer:?}"
    );
    let again = server.request(
        "POST",
        &format!("/v2/sandboxes/{id}/snapshots"),
        MASTER,
        Some(&json!({"name": "f2"})),
    );
    assert_eq!(again.status, 201, "{}", again.text());
    assert!(!is_frozen(&id), "thawed after the snapshot");
    server.destroy(MASTER, &id);
}
