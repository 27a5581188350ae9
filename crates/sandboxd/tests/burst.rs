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

#[test]
fn a_burst_of_concurrent_creates_gives_distinct_working_sandboxes() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with_env(data.path(), Some(MASTER), &ROOMY);
    // Twice: on the base pool (most creates cold), then on the pool the first grew.
    for round in 0..2 {
        let made: Vec<(usize, String)> = std::thread::scope(|s| {
            let creates: Vec<_> = (0..BURST)
                .map(|i| {
                    let server = &server;
                    s.spawn(move || {
                        let name = format!("burst-{round}-{i}");
                        let body = json!({"name": name, "vcpu": 1, "memoryMb": 128});
                        let id = server.create_sandbox(MASTER, &body);
                        let mark = format!("echo {i} > /tmp/mine && ls /tmp");
                        let (code, listed) = server.exec(MASTER, &id, &["/bin/sh", "-c", &mark]);
                        assert_eq!(code, 0, "the first exec of {id}");
                        // No other create's file: a root of its own.
                        assert_eq!(listed, "mine\n", "{id}'s /tmp");
                        (i, id)
                    })
                })
                .collect();
            creates
                .into_iter()
                .map(|c| c.join().expect("a create of the burst"))
                .collect()
        });
        let ids: std::collections::HashSet<&String> = made.iter().map(|(_, id)| id).collect();
        assert_eq!(ids.len(), BURST, "round {round}: distinct sandboxes");
        for (i, id) in &made {
            let (code, out) = server.exec(MASTER, id, &["/bin/sh", "-c", "cat /tmp/mine"]);
            assert_eq!(code, 0);
            assert_eq!(
                out.lines().next(),
                Some(i.to_string().as_str()),
                "{id} kept its own file"
            );
        }
        for (_, id) in &made {
            server.destroy(MASTER, id);
        }
    }
}
