//! A host that denies sandboxd CAP_SYS_RESOURCE (these development machines) cannot
//! protect agents from the OOM killer: the server says so once, not at every sandbox's
//! start (its log had the same warning at every create, warm refills included).

mod serve_bin;

use serde_json::json;
use serve_bin::Server;

/// `CAP_SYS_RESOURCE`'s bit (linux/capability.h).
const CAP_SYS_RESOURCE: u32 = 24;
const MASTER: &str = "oom-warning-once-test-master-key-0123456789";

/// Whether this process (so the server it starts) holds CAP_SYS_RESOURCE.
fn has_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .expect("CapEff");
    let bits = u64::from_str_radix(eff.trim(), 16).expect("hex");
    bits & (1 << CAP_SYS_RESOURCE) != 0
}

#[test]
fn the_oom_score_warning_is_said_once_per_server() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = Server::start(data.path(), Some(MASTER));
    let mut ids = Vec::new();
    // More than the pool holds: warm entries, their refills and cold starts all pass.
    for n in 0..4 {
        let id = server.create_sandbox(
            MASTER,
            &json!({"name": format!("oom-{n}"), "vcpu": 1, "memoryMb": 128}),
        );
        let (code, out) = server.exec(MASTER, &id, &["/bin/echo", "up"]);
        assert_eq!((code, out.trim()), (0, "up"));
        ids.push(id);
    }
    let warnings = server
        .log_lines()
        .into_iter()
        .filter(|l| l.contains("OOM score") && l.contains("WARN"))
        .count();
    for id in &ids {
        server.destroy(MASTER, id);
    }
    let expected = if has_sys_resource() { 0 } else { 1 };
    assert_eq!(warnings, expected, "OOM-score warnings in the server's log");
}
