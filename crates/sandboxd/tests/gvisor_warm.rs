//! The gVisor tier's warm pool: a start takes a sandbox started ahead of time (counted
//! as a hit), which then works as any (exec, files, its own limits, pause to disk and
//! back, reconcile keeps it), a start of another hostname takes one too and has its
//! own name inside, a start it cannot serve starts cold, and the drain leaves
//! nothing of the entries behind; an owner-less entry is swept however young; a
//! container-default server keeps a pool from its first gVisor create on, reports it
//! under `tier="gvisor"`, and drains it at stop. Skipped where runsc is missing.

mod common;
mod exposition;
mod gvisor_common;
mod serve_bin;

use gvisor_common::*;
use sandboxd_agent_protocol::AgentClient;
use sandboxd_runtime::linux::gvisor::{GvisorRuntime, MEMORY_OVERHEAD_MB, WARM_HOSTNAME};
use sandboxd_runtime::Runtime;
use std::path::Path;
use std::time::{Duration, Instant};

const DISK_MB: u32 = 64;

/// Waits (bounded) for the pool to hold `n` entries.
fn wait_ready(rt: &GvisorRuntime, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while rt.warm_pool_ready() < n {
        assert!(Instant::now() < deadline, "the warm pool did not fill");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Keys of the warm entries under `data`.
fn entry_keys(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("sandboxes"))
        .expect("sandboxes dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(".gvwarm-").map(str::to_string)
        })
        .collect()
}

/// Nothing of runsc container `key` is left: processes, state files, cgroups.
fn assert_key_gone(rt: &GvisorRuntime, key: &str) {
    assert_eq!(
        processes_naming(key),
        Vec::<i32>::new(),
        "{key}: processes left"
    );
    let files: Vec<_> = std::fs::read_dir(rt.runsc_root())
        .expect("runsc root")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(key))
        .map(|e| e.path())
        .collect();
    assert_eq!(
        files,
        Vec::<std::path::PathBuf>::new(),
        "{key}: runsc state left"
    );
    let id = uuid::Uuid::parse_str(key).expect("key");
    for dir in rt.cgroups().dirs(id) {
        assert!(!dir.exists(), "cgroup {} left behind", dir.display());
    }
}

fn memory_limit(rt: &GvisorRuntime, id: uuid::Uuid) -> u64 {
    let dir = rt
        .cgroups()
        .dirs(id)
        .into_iter()
        .find(|d| d.to_string_lossy().contains("/memory/"))
        .expect("a memory cgroup");
    std::fs::read_to_string(dir.join("memory.limit_in_bytes"))
        .expect("memory limit")
        .trim()
        .parse()
        .expect("a number")
}

#[test]
fn a_warm_gvisor_sandbox_serves_a_start_works_and_the_drain_leaves_nothing() {
    let data = tempfile::tempdir().expect("tempdir");
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let rt = Gvisor(
        raw_gvisor(data.path())
            .with_warm_pool(1)
            .expect("warm pool"),
    );
    rt.fill_warm_pool(DISK_MB);
    wait_ready(&rt, 1);
    let first_key = entry_keys(data.path()).pop().expect("an entry");

    let mut spec = common::spec("default");
    spec.hostname = WARM_HOSTNAME.into();
    spec.disk_mb = DISK_MB;
    spec.memory_mb = 200;
    let handle = rt.start(&spec).expect("start");
    let stats = rt.warm_pool().expect("pool stats");
    assert_eq!((stats.hits, stats.misses), (1, 0), "{stats:?}");
    assert!(handle.warm);
    assert_eq!(
        handle.state_dir,
        data.path().join("sandboxes").join(spec.id.to_string())
    );
    assert_eq!(
        memory_limit(&rt, spec.id),
        u64::from(200 + MEMORY_OVERHEAD_MB) << 20,
        "the start's limits are set on the taken sandbox"
    );

    // Exec and files work.
    let (code, out) = common::agent_sh(&handle, "echo warm-$((6*7)) > /root/f && cat /root/f");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("warm-42"), "{out}");
    let client = AgentClient::new(handle.agent_socket.clone());
    let body = futures_util::StreamExt::boxed(futures_util::stream::once(async {
        Ok(bytes::Bytes::from_static(b"uploaded"))
    }));
    block_on(client.write_file("/root/up.txt", 0o644, body)).expect("upload");
    let (code, out) = common::agent_sh(&handle, "cat /root/up.txt");
    assert_eq!((code, out.trim()), (Some(0), "uploaded"));

    // A server's reconcile keeps the sandbox (whose runsc container has the entry's
    // name) and the pool's refilled entry.
    wait_ready(&rt, 1);
    let refilled = entry_keys(data.path()).pop().expect("a refilled entry");
    let keep = std::collections::HashSet::from([handle.id]);
    assert_eq!(
        rt.reconcile(&keep, &Default::default()),
        Vec::<uuid::Uuid>::new()
    );
    assert!(rt.is_alive(&handle), "reconcile ended the taken sandbox");
    let (code, out) = common::agent_sh(&handle, "cat /root/f");
    assert_eq!(code, Some(0), "exec after reconcile: {out}");
    assert_eq!(rt.warm_pool_ready(), 1, "reconcile took the pool's entry");

    // Pause to disk and back (the bundle was rewritten for the new paths).
    let on_disk = rt.checkpoint(&handle).expect("pause to disk");
    let live = rt.restore(&on_disk).unwrap_or_else(|e| {
        let log = |f: &str| std::fs::read_to_string(on_disk.state_dir.join(f)).unwrap_or_default();
        panic!(
            "restore: {e}\nagent.log: {}\nrunsc.log: {}",
            log("layer/agent.log"),
            log("runsc.log")
        )
    });
    let (code, out) = common::agent_sh(&live, "cat /root/f");
    assert_eq!((code, out.trim()), (Some(0), "warm-42"));
    rt.destroy(&live).expect("destroy");
    assert_gone(&rt, &live);
    assert_key_gone(&rt, &first_key);

    // A start the pool cannot serve (another disk size) starts cold.
    let mut other = common::spec("default");
    other.disk_mb = DISK_MB * 2;
    let cold = rt.start(&other).expect("cold start");
    assert!(!cold.warm);
    let stats = rt.warm_pool().expect("pool stats");
    assert_eq!((stats.hits, stats.misses), (1, 1), "{stats:?}");
    let (code, out) = common::agent_sh(&cold, "cat /proc/sys/kernel/hostname");
    assert_eq!((code, out.trim()), (Some(0), "box"));
    rt.destroy(&cold).expect("destroy");

    // The drain leaves nothing of the entries.
    rt.drain_warm_pool();
    assert_eq!(
        entry_keys(data.path()),
        Vec::<String>::new(),
        "entry dirs left"
    );
    assert_key_gone(&rt, &refilled);
    assert_eq!(common::mounts_under(data.path()), Vec::<String>::new());
    assert_eq!(
        processes_under(data.path()),
        Vec::<i32>::new(),
        "runsc processes left"
    );
}

#[test]
fn a_warm_gvisor_sandbox_serves_a_start_of_another_hostname_under_that_name() {
    let data = tempfile::tempdir().expect("tempdir");
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let rt = Gvisor(
        raw_gvisor(data.path())
            .with_warm_pool(1)
            .expect("warm pool"),
    );
    rt.fill_warm_pool(DISK_MB);
    wait_ready(&rt, 1);
    let key = entry_keys(data.path()).pop().expect("an entry");

    let mut spec = common::spec("default");
    spec.hostname = "named-box".into();
    spec.disk_mb = DISK_MB;
    let handle = rt.start(&spec).expect("start");
    let stats = rt.warm_pool().expect("pool stats");
    assert_eq!((stats.hits, stats.misses), (1, 0), "{stats:?}");
    assert!(handle.warm);
    let (code, out) = common::agent_sh(&handle, "hostname; cat /proc/sys/kernel/hostname");
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["named-box", "named-box"],
        "{out}"
    );
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, &handle);
    assert_key_gone(&rt, &key);

    rt.drain_warm_pool();
    assert_eq!(
        entry_keys(data.path()),
        Vec::<String>::new(),
        "entry dirs left"
    );
    assert_eq!(common::mounts_under(data.path()), Vec::<String>::new());
    assert_eq!(
        processes_under(data.path()),
        Vec::<i32>::new(),
        "runsc processes left"
    );
}

#[test]
fn an_entry_without_an_owner_is_removed_by_the_next_runtime_however_young() {
    let data = tempfile::tempdir().expect("tempdir");
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    // A running entry whose removal was cut short after its owner mark went (a kill -9
    // mid-drain): the pool is forgotten, never drained, as the killed server's was.
    let rt = raw_gvisor(data.path())
        .with_warm_pool(1)
        .expect("warm pool");
    rt.fill_warm_pool(DISK_MB);
    wait_ready(&rt, 1);
    let key = entry_keys(data.path()).pop().expect("an entry");
    let dir = data.path().join("sandboxes").join(format!(".gvwarm-{key}"));
    std::fs::remove_file(dir.join("owner")).expect("remove the owner mark");
    assert!(!processes_naming(&key).is_empty(), "the entry runs");
    std::mem::forget(rt);
    // And an empty one, as a make leaves in its first instant.
    let empty = data
        .path()
        .join("sandboxes")
        .join(format!(".gvwarm-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir(&empty).expect("empty entry dir");

    // The next runtime, opened within the minute, removes both.
    let next = Gvisor(raw_gvisor(data.path()));
    assert_eq!(
        entry_keys(data.path()),
        Vec::<String>::new(),
        "entry dirs left"
    );
    assert_key_gone(&next, &key);
    assert_eq!(common::mounts_under(data.path()), Vec::<String>::new());
    assert_eq!(
        processes_under(data.path()),
        Vec::<i32>::new(),
        "runsc processes left"
    );
}

/// Warm entries under `data` whose owner mark is written (a make writes it first, so
/// with two marked, the first of them is in the pool: entries are made in turn).
fn marked_entries(data: &Path) -> usize {
    warm_entry_keys(data)
        .iter()
        .filter(|k| {
            data.join("sandboxes")
                .join(format!(".gvwarm-{k}/owner"))
                .exists()
        })
        .count()
}

#[test]
fn a_container_server_keeps_warm_gvisor_sandboxes_from_its_first_gvisor_create_and_drains_them() {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    use exposition::{scrape, value, MASTER};
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let _leftovers = ServerLeftovers(data.clone());
    let env = [
        ("SANDBOXD_ISOLATION", "container"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    let (server, metrics) = exposition::start(&data, &env);
    let gvisor_figure = |name: &str| value(&scrape(metrics).1, name, &[("tier", "gvisor")]);

    // Container creates spend nothing on gVisor.
    let plain = server.create_sandbox(
        MASTER,
        &serde_json::json!({"name": "plain", "vcpu": 1, "memoryMb": 256}),
    );
    assert_eq!(warm_entry_keys(&data), Vec::<String>::new());
    assert_eq!(processes_under(&data), Vec::<i32>::new());

    // The workspace's tier goes to gvisor: the first gVisor create starts cold and
    // begins the pool.
    let dir_arg = data.to_str().expect("utf-8 dir");
    let args = [
        "workspace",
        "set-isolation",
        "default",
        "gvisor",
        "--data-dir",
        dir_arg,
    ];
    let out = serve_bin::cli(&args, "");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "gvisor");
    let n = std::cell::Cell::new(0);
    let create_gvisor = || {
        n.set(n.get() + 1);
        let body =
            serde_json::json!({"name": format!("gv-{}", n.get()), "vcpu": 1, "memoryMb": 256});
        server.create_sandbox(MASTER, &body)
    };
    let first = create_gvisor();
    assert_eq!(gvisor_figure("sandboxd_warm_pool_misses_total"), 1.0);
    assert_eq!(gvisor_figure("sandboxd_warm_pool_hits_total"), 0.0);
    common::wait_for("the gVisor pool filled", || marked_entries(&data) >= 2);
    assert!(gvisor_figure("sandboxd_warm_pool_ready") >= 1.0);

    // The next one takes an entry, and runs under gVisor.
    let second = create_gvisor();
    assert_eq!(gvisor_figure("sandboxd_warm_pool_hits_total"), 1.0);
    assert_eq!(
        value(
            &scrape(metrics).1,
            "sandboxd_warm_pool_hits_total",
            &[("tier", "container")]
        ) + value(
            &scrape(metrics).1,
            "sandboxd_warm_pool_misses_total",
            &[("tier", "container")]
        ),
        1.0,
        "the container create counts on its own tier"
    );
    let runsc_id = std::fs::read_to_string(data.join("sandboxes").join(&second).join("runsc-id"))
        .expect("the second create took a warm entry");
    let (code, out) = server.exec(MASTER, &second, &["/bin/sh", "-c", "dmesg | head -3"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("gVisor"), "not under gVisor: {out}");

    for id in [&first, &second, &plain] {
        server.destroy(MASTER, id);
    }
    common::wait_for("the sandboxes gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    let mut keys = warm_entry_keys(&data);
    keys.push(runsc_id.trim().to_owned());
    drop(server);
    // The stop drains the pool: nothing of the entries (or the taken one) is left.
    assert_eq!(warm_entry_keys(&data), Vec::<String>::new());
    assert_eq!(processes_under(&data), Vec::<i32>::new());
    for key in &keys {
        assert_eq!(cgroups_named(key), Vec::<std::path::PathBuf>::new());
    }
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

/// REVIEW12 #10: on cgroup v1 a warm entry (made with its own memory and memory+swap
/// limits) is handed to a start asking for more memory than it was made with: the
/// limits are raised (memory+swap first), not refused, and the start is warm.
#[test]
fn a_warm_gvisor_sandbox_serves_a_start_asking_for_more_memory_than_it_was_made_with() {
    let data = tempfile::tempdir().expect("tempdir");
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let rt = Gvisor(
        raw_gvisor(data.path())
            .with_warm_pool(1)
            .expect("warm pool"),
    );
    rt.fill_warm_pool(DISK_MB);
    wait_ready(&rt, 1);

    let mut spec = common::spec("default");
    spec.hostname = WARM_HOSTNAME.into();
    spec.disk_mb = DISK_MB;
    spec.memory_mb = 2048;
    let handle = rt.start(&spec).expect("start");
    let stats = rt.warm_pool().expect("pool stats");
    assert_eq!((stats.hits, stats.misses), (1, 0), "{stats:?}");
    assert!(handle.warm, "the bigger start did not take the warm entry");
    assert_eq!(
        memory_limit(&rt, spec.id),
        u64::from(2048 + MEMORY_OVERHEAD_MB) << 20
    );
    let (code, out) = common::agent_sh(&handle, "echo big");
    assert_eq!((code, out.as_str()), (Some(0), "big\n"));
    rt.destroy(&handle).expect("destroy");
}
