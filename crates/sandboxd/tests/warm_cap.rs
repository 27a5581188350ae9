//! The warm pool is bounded by what the server may run: with `max_sandboxes` 2 and the
//! default start size (20), a server keeps at most 2 warm entries of any shape, fewer
//! while sandboxes run, and its 2 sandboxes still start.

mod common;
mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::path::Path;

const MASTER: &str = "warm-cap-test-master-key-0123456789";

/// Warm entries under `data` (`sandboxes/.warm-<key>`), ready or being made.
fn entries(data: &Path) -> usize {
    std::fs::read_dir(data.join("sandboxes")).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".warm-"))
            .count()
    })
}

/// The most entries seen over `samples` looks 50 ms apart.
fn most_entries(data: &Path, samples: usize) -> usize {
    (0..samples)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            entries(data)
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn a_server_keeps_no_more_warm_entries_than_it_may_run_sandboxes() {
    let data = tempfile::tempdir().expect("tempdir");
    let data_dir = data.path().canonicalize().expect("canonical");
    let server = Server::start_with_env(
        &data_dir,
        Some(MASTER),
        &[
            ("SANDBOXD_MAX_SANDBOXES", "2"),
            ("SANDBOXD_WARM_INITS_START", "20"),
            ("SANDBOXD_NETWORK", "none"),
        ],
    );
    common::wait_for("the pool filled to the cap", || entries(&data_dir) >= 2);
    let most = most_entries(&data_dir, 100);
    assert!(most <= 2, "{most} warm entries with max_sandboxes 2");

    let ids: Vec<String> = (0..2)
        .map(|i| {
            let body = json!({"name": format!("capped-{i}"), "vcpu": 1, "memoryMb": 128});
            server.create_sandbox(MASTER, &body)
        })
        .collect();
    for id in &ids {
        assert_eq!(server.exec(MASTER, id, &["/bin/echo", "ok"]).0, 0);
    }
    // Both sandboxes run: no create could take an entry.
    common::wait_for("no entry kept beside 2 running sandboxes", || {
        entries(&data_dir) == 0
    });
    for id in &ids {
        server.destroy(MASTER, id);
    }
    drop(server);
    assert_eq!(entries(&data_dir), 0, "the stop drains the pool");
}
