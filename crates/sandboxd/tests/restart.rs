//! Restart: `kill -9` the real `sandboxd serve` while a sandbox and a process run; a
//! new `serve` on the same data directory answers get, exec and processes as before,
//! and destroying afterwards leaves no process, cgroup, mount or directory behind.

mod serve_bin;

use serde_json::{json, Value};
use serve_bin::Server;
use std::path::Path;

const MASTER: &str = "restart-test-master-key-0123456789";

#[test]
fn sandboxes_and_processes_survive_kill_9() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical data dir");
    let first = Server::start(&data, Some(MASTER));
    let id = first.create_sandbox(
        MASTER,
        &json!({"name": "restart", "vcpu": 1, "memoryMb": 256}),
    );
    let processes = format!("/v2/sandboxes/{id}/processes");
    let started = first.request(
        "POST",
        &processes,
        MASTER,
        Some(&json!({"command": ["/bin/sleep", "1000"]})),
    );
    assert_eq!(started.status, 201, "{}", started.text());
    let process = started.json()["data"].clone();
    assert_eq!(process["state"], "RUNNING");
    let sandbox_before = first
        .request("GET", &format!("/v2/sandboxes/{id}"), MASTER, None)
        .json()["data"]
        .clone();
    assert_eq!(
        host_processes(&id, "sleep").len(),
        1,
        "the sleep runs in the sandbox's cgroup"
    );
    // The server's warm inits serve parked in their roots; with the server gone before
    // their sandboxes start, they end on their own (before any new server sweeps them).
    let warm = warm_keys(&data);
    assert!(!warm.is_empty(), "the server keeps warm inits");
    // An entry may still be being made (dir first, process after): wait for them all.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !warm.iter().all(|k| !host_processes(k, "").is_empty()) {
        assert!(
            std::time::Instant::now() < deadline,
            "warm inits without a process"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    first.kill9();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while warm.iter().any(|k| !host_processes(k, "").is_empty()) {
        assert!(
            std::time::Instant::now() < deadline,
            "warm inits outlived their server"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        host_processes(&id, "sleep").len(),
        1,
        "the sandbox outlived it"
    );

    let second = Server::start(&data, Some(MASTER));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        after_restart(&second, &id, &sandbox_before, &process)
    }));
    second.destroy(MASTER, &id);
    drop(second);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert_gone(&data, &id);
}

fn after_restart(server: &Server, id: &str, sandbox_before: &Value, process: &Value) {
    let sandbox = server.request("GET", &format!("/v2/sandboxes/{id}"), MASTER, None);
    assert_eq!(sandbox.status, 200, "{}", sandbox.text());
    assert_eq!(&sandbox.json()["data"], sandbox_before);
    let (code, out) = server.exec(MASTER, id, &["/bin/sh", "-c", "echo again; exit 3"]);
    assert_eq!((code, out.as_str()), (3, "again\n"));

    let list = server.request(
        "GET",
        &format!("/v2/sandboxes/{id}/processes"),
        MASTER,
        None,
    );
    assert_eq!(list.status, 200, "{}", list.text());
    let listed = list.json()["data"].clone();
    let same: Vec<&Value> = listed
        .as_array()
        .expect("process list")
        .iter()
        .filter(|p| p["id"] == process["id"])
        .collect();
    assert_eq!(same.len(), 1, "{listed}");
    assert_eq!(same[0]["state"], "RUNNING");
    assert_eq!(same[0]["pid"], process["pid"]);
    assert_eq!(same[0]["command"], json!(["/bin/sleep", "1000"]));
    let path = format!(
        "/v2/sandboxes/{id}/processes/{}",
        process["id"].as_str().unwrap_or_default()
    );
    let got = server.request("GET", &path, MASTER, None).json()["data"].clone();
    assert_eq!(&got, same[0]);
    assert_eq!(
        host_processes(id, "sleep").len(),
        1,
        "the sleep survived the restart"
    );
}

/// Keys of the parked warm entries under `data` (their agent socket is bound; their
/// dir and cgroup are named after the key), waiting up to 20 s for one.
fn warm_keys(data: &Path) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let keys: Vec<String> = std::fs::read_dir(data.join("sandboxes"))
            .expect("sandboxes dir")
            .flatten()
            .filter(|e| e.path().join("agent.sock").exists())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix(".warm-").map(str::to_owned)
            })
            .collect();
        if !keys.is_empty() || std::time::Instant::now() > deadline {
            return keys;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Host PIDs of processes in sandbox `id`'s cgroup whose command name is `comm`.
fn host_processes(id: &str, comm: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
        let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if cgroup.contains(id) && (comm.is_empty() || name.trim() == comm) {
            found.push(pid);
        }
    }
    found
}

/// Nothing of sandbox `id` is left: process, cgroup directory, mount or state directory.
fn assert_gone(data: &Path, id: &str) {
    assert_eq!(host_processes(id, ""), Vec::<u32>::new(), "processes left");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let prefix = data.display().to_string();
    let mounts: Vec<&str> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&prefix) || m.contains(id))
        .collect();
    assert_eq!(mounts, Vec::<&str>::new(), "mounts left");
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let is_cgroup = line
            .split(" - ")
            .nth(1)
            .is_some_and(|t| t.starts_with("cgroup"));
        if let (true, Some(mount_point)) = (is_cgroup, fields.get(4)) {
            let dir = Path::new(mount_point).join("sandboxd").join(id);
            assert!(!dir.exists(), "cgroup {} left", dir.display());
        }
    }
    assert!(
        !data.join("sandboxes").join(id).exists(),
        "state directory left"
    );
}
