//! A burst of concurrent creates through the real `sandboxd serve`: every create is
//! answered RUNNING with a sandbox of its own (no two share an init, a root or an id),
//! and each one's first exec works.

mod serve_bin;

use serde_json::json;
use serve_bin::Server;

const MASTER: &str = "burst-test-master-key-0123456789abcdef";
const BURST: usize = 12;

/// Limits that admit the whole burst at once.
const ROOMY: [(&str, &str); 7] = [
    ("SANDBOXD_MAX_SANDBOXES", "64"),
    ("SANDBOXD_MAX_VCPU_TOTAL", "64"),
    ("SANDBOXD_MAX_MEMORY_MIB_TOTAL", "1000000"),
    ("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", "64"),
    ("SANDBOXD_WORKSPACE_QUOTA_VCPU", "64"),
    ("SANDBOXD_WORKSPACE_QUOTA_MEMORY_MB", "1000000"),
    ("SANDBOXD_CREATE_RATE_BURST", "64"),
];

/// One create of the burst and its first exec: its id once answered, and what went
/// wrong, if anything (checked after every sandbox made is destroyed again).
fn create_and_mark(
    server: &Server,
    round: usize,
    i: usize,
) -> (Option<String>, Result<(), String>) {
    let body = json!({"name": format!("burst-{round}-{i}"), "vcpu": 1, "memoryMb": 128});
    let reply = server.request("POST", "/v2/sandboxes", MASTER, Some(&body));
    let data = &reply.json()["data"];
    let Some(id) = data["id"].as_str().filter(|_| reply.status == 201) else {
        return (
            None,
            Err(format!("create: {} {}", reply.status, reply.text())),
        );
    };
    let id = id.to_owned();
    if data["status"] != "RUNNING" {
        return (Some(id), Err(format!("answered {}", data["status"])));
    }
    let mark = format!("echo {i} > /tmp/mine && ls /tmp");
    let body = json!({"command": ["/bin/sh", "-c", mark]});
    let reply = server.request(
        "POST",
        &format!("/v2/sandboxes/{id}/exec"),
        MASTER,
        Some(&body),
    );
    let out = &reply.json()["data"];
    let stdout = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        out["stdout"].as_str().unwrap_or_default(),
    )
    .unwrap_or_default();
    // No other create's file: a root of its own.
    let checked = match (reply.status, out["exitCode"].as_i64(), stdout.as_slice()) {
        (200, Some(0), b"mine\n") => Ok(()),
        other => Err(format!("first exec of {id}: {other:?} {}", reply.text())),
    };
    (Some(id), checked)
}

#[test]
fn a_burst_of_concurrent_creates_gives_distinct_working_sandboxes() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with_env(data.path(), Some(MASTER), &ROOMY);
    // Twice: on the base pool (most creates cold), then on the pool the first grew.
    for round in 0..2 {
        let made: Vec<(Option<String>, Result<(), String>)> = std::thread::scope(|s| {
            let creates: Vec<_> = (0..BURST)
                .map(|i| {
                    let server = &server;
                    s.spawn(move || create_and_mark(server, round, i))
                })
                .collect();
            creates
                .into_iter()
                .map(|c| c.join().expect("a create of the burst"))
                .collect()
        });
        let kept: Vec<(usize, String)> = made
            .iter()
            .enumerate()
            .filter_map(|(i, (id, _))| Some((i, id.clone()?)))
            .collect();
        let reread: Vec<(i64, String)> = kept
            .iter()
            .map(|(_, id)| server.exec(MASTER, id, &["/bin/sh", "-c", "cat /tmp/mine"]))
            .collect();
        // Sandboxes keep running after the server stops: destroyed before any verdict.
        for (_, id) in &kept {
            server.destroy(MASTER, id);
        }
        for (id, checked) in &made {
            assert_eq!(checked, &Ok(()), "round {round}: {id:?}");
        }
        let ids: std::collections::HashSet<&String> = kept.iter().map(|(_, id)| id).collect();
        assert_eq!(ids.len(), BURST, "round {round}: distinct sandboxes");
        for ((i, id), (code, out)) in kept.iter().zip(&reread) {
            assert_eq!(
                (*code, out.trim()),
                (0, i.to_string().as_str()),
                "{id} kept its file"
            );
        }
    }
}
