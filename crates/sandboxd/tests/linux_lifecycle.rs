//! Start, health, freeze/thaw and destroy of real sandboxes; nothing may leak.

mod common;

use common::*;
use sandboxd_runtime::{Runtime, RuntimeError};

#[test]
fn start_answers_health_as_pid_1_and_destroy_leaves_nothing() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let handle = rt.start(&spec("default")).expect("start");
    assert!(rt.is_alive(&handle));
    let body = get(&handle.agent_socket, "/v1/health");
    assert!(body.contains("\"pid\":1"), "health body {body:?}");
    assert!(rt.usage(&handle).expect("usage").pids >= 1);
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, data.path(), &handle);
    rt.destroy(&handle).expect("destroy is idempotent");
}

#[test]
fn inside_is_isolated_and_root_can_write_etc() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let handle = rt.start(&spec("default")).expect("start");
    assert_eq!(sh_ok(&handle, "hostname").trim(), "box");
    assert_eq!(
        sh_ok(&handle, "id -u; stat -c %u /etc/passwd")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["0", "0"]
    );
    sh_ok(&handle, "echo written > /etc/marker");
    let upper = handle.state_dir.join("layer/upper/etc/marker");
    assert_eq!(
        std::fs::read_to_string(&upper).expect("upper copy"),
        "written\n"
    );
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&upper).expect("meta")),
        handle.host_id_base
    );
    assert_eq!(sh_ok(&handle, "python3 -c 'print(6*7)'").trim(), "42");
    // Nothing of the host is visible; only the sandbox's processes are.
    assert_eq!(
        sh_ok(&handle, "test -e /work || test -e /farm || echo hidden").trim(),
        "hidden"
    );
    assert_eq!(sh_ok(&handle, "cat /proc/1/comm").trim(), "sandboxd");
    assert_eq!(
        sh_ok(
            &handle,
            "ip -o link 2>/dev/null | wc -l; cat /sys/class/net/lo/operstate"
        )
        .split_whitespace()
        .last(),
        Some("unknown")
    );
    assert!(sh(&handle, "echo x > /usr/should-fail").status.code() != Some(0));
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, data.path(), &handle);
}

#[test]
fn freeze_then_thaw() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let handle = rt.start(&spec("default")).expect("start");
    rt.freeze(&handle).expect("freeze");
    assert!(rt.cgroups().is_frozen(handle.id));
    rt.thaw(&handle).expect("thaw");
    assert!(!rt.cgroups().is_frozen(handle.id));
    assert!(get(&handle.agent_socket, "/v1/health").contains("\"pid\":1"));
    rt.freeze(&handle).expect("freeze again");
    rt.destroy(&handle).expect("destroy a frozen sandbox");
    assert_gone(&rt, data.path(), &handle);
}

#[test]
fn failed_starts_leak_nothing() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let unknown = spec("no-such-image");
    assert!(matches!(
        rt.start(&unknown),
        Err(RuntimeError::UnknownImage(_))
    ));
    let mut bad_layer = spec("default");
    bad_layer.extra_layers = vec!["0".repeat(64)];
    assert!(matches!(
        rt.start(&bad_layer),
        Err(RuntimeError::UnknownLayer(_))
    ));
    // A hostname the kernel refuses fails inside PID 1, after every host step is done.
    let mut bad_host = spec("default");
    bad_host.hostname = "h".repeat(100);
    let err = rt.start(&bad_host).expect_err("start must fail");
    assert!(
        matches!(&err, RuntimeError::AgentStart(m) if m.contains("sethostname")),
        "{err}"
    );
    let sandboxes: Vec<_> = std::fs::read_dir(data.path().join("sandboxes"))
        .expect("dir")
        .collect();
    assert_eq!(sandboxes.len(), 0);
    assert_eq!(slot_leases(data.path()), Vec::<String>::new());
    assert_eq!(mounts_under(data.path()), Vec::<String>::new());
    for s in [&unknown, &bad_layer, &bad_host] {
        for dir in rt.cgroups().dirs(s.id) {
            assert!(!dir.exists(), "cgroup {} left behind", dir.display());
        }
    }
}

#[test]
fn twenty_concurrent_sandboxes_leave_nothing() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = std::sync::Arc::new(runtime(data.path()));
    let threads: Vec<_> = (0..20)
        .map(|_| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                let handle = rt.start(&spec("default")).expect("start");
                assert!(get(&handle.agent_socket, "/v1/health").contains("\"pid\":1"));
                rt.destroy(&handle).expect("destroy");
                handle
            })
        })
        .collect();
    let handles: Vec<_> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    let bases: std::collections::BTreeSet<_> = handles.iter().map(|h| h.host_id_base).collect();
    assert_eq!(bases.len(), 20, "id ranges must be distinct");
    for handle in &handles {
        assert_gone(&rt, data.path(), handle);
    }
    assert_eq!(mounts_under(data.path()), Vec::<String>::new());
}

#[test]
fn a_new_backend_instance_destroys_from_the_handle_alone() {
    let data = tempfile::tempdir().expect("tempdir");
    let handle = {
        let first = raw_runtime(data.path());
        first.start(&spec("default")).expect("start")
    };
    let saved: sandboxd_runtime::SandboxHandle = serde_json::from_slice(
        &std::fs::read(handle.state_dir.join("handle.json")).expect("handle.json"),
    )
    .expect("parse");
    assert_eq!(saved, handle);
    let second = runtime(data.path());
    assert!(second.is_alive(&saved));
    // The restarted backend must not hand out the live sandbox's id range.
    let other = second.start(&spec("default")).expect("start another");
    assert_ne!(other.host_id_base, saved.host_id_base);
    for h in [&saved, &other] {
        second.destroy(h).expect("destroy");
        assert_gone(&second, data.path(), h);
    }
}

#[test]
fn destroyed_agents_are_reaped_not_left_as_zombies() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    for _ in 0..5 {
        let handle = rt.start(&spec("default")).expect("start");
        rt.destroy(&handle).expect("destroy");
        assert_gone(&rt, data.path(), &handle);
    }
    assert_eq!(zombie_children(), Vec::<i32>::new());
}
