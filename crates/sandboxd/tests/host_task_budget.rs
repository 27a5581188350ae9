//! A sandbox's task limit leaves the host room: unset, `pids_per_sandbox` is derived from
//! the host's task table so that `max_sandboxes` sandboxes at their limit hold at most
//! three quarters of it (one tenant cannot take every PID the host and other tenants
//! need); set, it is obeyed. Read from the sandbox's own `pids` cgroup on the host.

mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::path::PathBuf;

const MASTER: &str = "host-task-budget-test-master-key-0123456789";

/// The host's task table, as the server reads it.
fn host_tasks() -> u64 {
    let read = |name: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
            .expect("sysctl")
            .trim()
            .parse()
            .expect("number")
    };
    read("pid_max").min(read("threads-max"))
}

/// `pids.max` of sandbox `id`'s cgroup (whatever parent the server uses).
fn pids_max(id: &str) -> String {
    let found: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup/pids")
        .expect("pids hierarchy")
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(id).join("pids.max"))
        .filter(|p| p.exists())
        .collect();
    assert_eq!(found.len(), 1, "one pids cgroup of {id}: {found:?}");
    std::fs::read_to_string(&found[0])
        .expect("pids.max")
        .trim()
        .to_owned()
}

fn limit_of_a_sandbox(env: &[(&str, &str)]) -> u64 {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().canonicalize().expect("canonical");
    let server = Server::start_with_env(&data, Some(MASTER), env);
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "tasks", "vcpu": 1, "memoryMb": 128}),
    );
    let limit = pids_max(&id).parse().expect("a number");
    server.destroy(MASTER, &id);
    limit
}

#[test]
fn the_default_task_limit_leaves_a_quarter_of_the_hosts_tasks_to_others() {
    let max_sandboxes = 100; // the default
    let limit = limit_of_a_sandbox(&[]);
    let tasks = host_tasks();
    let want = (tasks * 3 / 4 / max_sandboxes).clamp(32, 1024);
    assert_eq!(limit, want, "host tasks {tasks}");
    assert!(
        limit * max_sandboxes <= tasks * 3 / 4 || limit == 32,
        "{max_sandboxes} sandboxes of {limit} tasks on a host of {tasks}"
    );
}

#[test]
fn a_configured_task_limit_is_obeyed() {
    assert_eq!(
        limit_of_a_sandbox(&[("SANDBOXD_PIDS_PER_SANDBOX", "77")]),
        77
    );
}
