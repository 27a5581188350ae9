//! Memory snapshots through the HTTP APIs: a snapshot of a running gVisor sandbox keeps
//! its processes, and each sandbox created from it (Inngest `snapshotId`) continues
//! them on its own (a fork), with its own files and hostname, across a server restart;
//! deleting the snapshot and its clones leaves nothing behind. A container sandbox's
//! snapshot stays filesystem-only and says so. Skipped where runsc is missing.

mod common;
mod fakenet;
mod gvisor_common;
mod serve_bin;

use gvisor_common::*;
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use serde_json::json;
use std::path::Path;

/// A Python process whose counter lives only in its memory: each time `/root/inc`
/// appears it counts one, writes the count to `/root/count` and removes the request.
const COUNTER: &str = r#"import os, time
n = 0
while True:
    if os.path.exists('/root/inc'):
        n += 1
        open('/root/count.tmp', 'w').write(str(n))
        os.rename('/root/count.tmp', '/root/count')
        os.remove('/root/inc')
    time.sleep(0.02)
"#;

/// Asks sandbox `id`'s counter process to count one; returns its new count.
fn increment(server: &serve_bin::Server, id: &str) -> u64 {
    let script = "touch /root/inc; while [ -e /root/inc ]; do sleep 0.02; done; cat /root/count";
    let (code, out) = server.exec(MASTER, id, &["/bin/sh", "-c", script]);
    assert_eq!(code, 0, "{out}");
    out.trim().parse().expect("a count")
}

fn sh(server: &serve_bin::Server, id: &str, script: &str) -> (i64, String) {
    server.exec(MASTER, id, &["/bin/sh", "-c", script])
}

fn create(server: &serve_bin::Server, body: serde_json::Value) -> String {
    let r = server.request("POST", "/v2/sandboxes", MASTER, Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["data"]["status"], "RUNNING", "{}", r.text());
    r.json()["data"]["id"].as_str().expect("id").to_string()
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn two_sandboxes_created_from_a_memory_snapshot_each_continue_its_processes() {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let _leftovers = ServerLeftovers(data.clone());
    let env = [
        ("SANDBOXD_ISOLATION", "gvisor"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &env);
    let source = create(
        &server,
        json!({"name": "source", "vcpu": 1, "memoryMb": 256}),
    );
    let launch = format!(
        "printf '%s' \"{COUNTER}\" > /root/counter.py && \
         setsid python3 /root/counter.py </dev/null >/dev/null 2>&1 &"
    );
    let (code, out) = sh(&server, &source, &launch);
    assert_eq!(code, 0, "{out}");
    for want in 1..=3 {
        assert_eq!(increment(&server, &source), want);
    }

    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{source}/snapshots"),
        MASTER,
        Some(&json!({"name": "counting"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let snap = r.json()["data"].clone();
    assert_eq!(snap["memory"], true, "{snap}");
    assert_eq!(snap["memoryPackCount"], 1, "{snap}");
    let snapshot = snap["id"].as_str().expect("id").to_string();
    // The source runs on, its counter where it was.
    assert_eq!(increment(&server, &source), 4);

    // The snapshot (its memory image) outlives a server restart.
    drop(server);
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &env);
    let r = server.request("GET", &format!("/v2/snapshots/{snapshot}"), MASTER, None);
    assert_eq!(r.json()["data"]["memory"], true, "{}", r.text());

    let clones: Vec<String> = ["fork-a", "fork-b"]
        .iter()
        .map(|name| create(&server, json!({"name": name, "snapshotId": snapshot})))
        .collect();
    let (a, b) = (&clones[0], &clones[1]);
    // Each continues the counter from the snapshot's 3 (a new process would say 1),
    // on its own: they diverge.
    assert_eq!(increment(&server, a), 4);
    assert_eq!(increment(&server, a), 5);
    assert_eq!(increment(&server, b), 4);
    assert_eq!(increment(&server, a), 6);
    assert_eq!(increment(&server, source.as_str()), 5);
    // Own files.
    let (code, out) = sh(&server, a, "echo mine > /root/only-in-a");
    assert_eq!(code, 0, "{out}");
    let (code, _) = sh(&server, b, "test -e /root/only-in-a");
    assert_ne!(code, 0, "the second clone sees the first's file");
    let (code, _) = sh(&server, &source, "test -e /root/only-in-a");
    assert_ne!(code, 0, "the source sees a clone's file");
    // Own hostnames (the memory image holds the source's).
    for (id, name) in [(&source, "source"), (a, "fork-a"), (b, "fork-b")] {
        let (code, out) = sh(&server, id, "cat /proc/sys/kernel/hostname");
        assert_eq!((code, out.trim()), (0, name));
    }

    // Deleting the snapshot leaves the clones running (their memory is their own).
    let r = server.request("DELETE", &format!("/v2/snapshots/{snapshot}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
    assert_eq!(increment(&server, b), 5);

    for id in clones.iter().chain([&source]) {
        server.destroy(MASTER, id);
    }
    common::wait_for("every sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    common::wait_for("every state dir gone", || {
        sandbox_dir_names(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
    assert_eq!(entries(&data.join("runsc")), Vec::<String>::new());
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
}

#[test]
fn a_container_sandbox_snapshot_is_filesystem_only_and_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let env = [
        ("SANDBOXD_ISOLATION", "container"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &env);
    let source = create(
        &server,
        json!({"name": "plain", "vcpu": 1, "memoryMb": 256}),
    );
    let (code, out) = sh(&server, &source, "echo kept > /root/file");
    assert_eq!(code, 0, "{out}");
    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{source}/snapshots"),
        MASTER,
        None,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let snap = r.json()["data"].clone();
    assert_eq!(snap["memory"], false, "{snap}");
    assert_eq!(snap["memoryPackCount"], 0, "{snap}");
    let snapshot = snap["id"].as_str().expect("id").to_string();
    let clone = create(&server, json!({"name": "copy", "snapshotId": snapshot}));
    let (code, out) = sh(&server, &clone, "cat /root/file");
    assert_eq!((code, out.trim()), (0, "kept"));
    assert!(!data.join("memory-snapshots").exists());
    for id in [&clone, &source] {
        server.destroy(MASTER, id);
    }
    let r = server.request("DELETE", &format!("/v2/snapshots/{snapshot}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

#[test]
fn an_openrelay_template_made_from_a_gvisor_sandbox_starts_forks_of_it() {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let _leftovers = ServerLeftovers(data.clone());
    let env = [
        ("SANDBOXD_ISOLATION", "gvisor"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &env);
    let source = create(
        &server,
        json!({"name": "source", "vcpu": 1, "memoryMb": 256}),
    );
    let launch = format!(
        "printf '%s' \"{COUNTER}\" > /root/counter.py && \
         setsid python3 /root/counter.py </dev/null >/dev/null 2>&1 &"
    );
    let (code, out) = sh(&server, &source, &launch);
    assert_eq!(code, 0, "{out}");
    assert_eq!(increment(&server, &source), 1);

    // Building from a sandbox takes nothing else.
    let r = server.request(
        "POST",
        "/v1/sandbox-templates",
        MASTER,
        Some(&json!({"name": "forked", "fromSandbox": source, "run": ["true"]})),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let r = server.request(
        "POST",
        "/v1/sandbox-templates",
        MASTER,
        Some(&json!({"name": "forked", "fromSandbox": source})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["memory"], true, "{}", r.text());
    assert_eq!(increment(&server, &source), 2);

    let r = server.request(
        "POST",
        "/v1/sandboxes",
        MASTER,
        Some(&json!({"template": "forked"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let clone = r.json()["id"].as_str().expect("id").to_string();
    assert_eq!(increment(&server, &clone), 2, "the fork continues from 1");
    assert_eq!(increment(&server, &source), 3);

    let r = server.request("DELETE", "/v1/sandbox-templates/forked", MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
    for id in [&clone, &source] {
        server.destroy(MASTER, id);
    }
    common::wait_for("every sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

/// Sets workspace `default`'s egress policy: the fake host's /29 allowed, `deny` denied.
fn set_policy(data: &Path, fake: &fakenet::FakeNet, deny: &str) {
    let allow = format!("{}.0/29", fake.prefix);
    let args = [
        "network-policy",
        "set",
        "--workspace",
        "default",
        "--allow",
        &allow,
        "--deny",
        deny,
        "--data-dir",
        data.to_str().expect("utf-8"),
    ];
    let out = serve_bin::cli(&args, "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// "ok <own address> hello" or "err ...": a TCP connect from inside sandbox `id`.
fn local_probe(server: &serve_bin::Server, id: &str, host: &str) -> String {
    let args = ["/usr/bin/python3", "-c", fakenet::LOCAL_PROBE, host, "8080"];
    let (code, out) = server.exec(MASTER, id, &args);
    assert_eq!(code, 0, "probe failed: {out}");
    out.trim().to_string()
}

/// Forks of a sandbox with egress (Inngest `snapshotId`, an OpenRelay template
/// `fromSandbox`) each get a network of their own: their own namespace, link, lease
/// and address, under the policy their workspace has when they are made (here changed
/// after the source started: .3 allowed, .4 denied), and each one's lease, link and
/// chain go with it.
#[test]
fn forks_of_an_egress_sandbox_get_their_own_address_and_their_workspace_policy() {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let fake = fakenet::FakeNet::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let _leftovers = ServerLeftovers(data.clone());
    let resolver = fake.addr(2);
    let env = [
        ("SANDBOXD_ISOLATION", "gvisor"),
        ("SANDBOXD_NETWORK", "egress"),
        ("SANDBOXD_RESOLVERS", resolver.as_str()),
    ];
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &env);
    set_policy(&data, &fake, &fake.addr(3));
    let source = create(
        &server,
        json!({"name": "source", "vcpu": 1, "memoryMb": 256}),
    );
    let source_addr = fakenet::leased_address(&source).expect("the source's lease");
    let launch = format!(
        "printf '%s' \"{COUNTER}\" > /root/counter.py && \
         setsid python3 /root/counter.py </dev/null >/dev/null 2>&1 &"
    );
    let (code, out) = sh(&server, &source, &launch);
    assert_eq!(code, 0, "{out}");
    for want in 1..=3 {
        assert_eq!(increment(&server, &source), want);
    }
    assert!(local_probe(&server, &source, &fake.addr(3)).starts_with("err"));

    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{source}/snapshots"),
        MASTER,
        Some(&json!({"name": "counting"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["data"]["memory"], true, "{}", r.text());
    let snapshot = r.json()["data"]["id"].as_str().expect("id").to_string();
    let r = server.request(
        "POST",
        "/v1/sandbox-templates",
        MASTER,
        Some(&json!({"name": "forked", "fromSandbox": source})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["memory"], true, "{}", r.text());
    assert_eq!(
        local_probe(&server, &source, &fake.addr(2)),
        format!("ok {source_addr} hello"),
        "the source's network after its snapshots"
    );

    // The workspace's policy changes before the forks are made.
    set_policy(&data, &fake, &fake.addr(4));
    let mut clones: Vec<String> = ["fork-a", "fork-b"]
        .iter()
        .map(|name| create(&server, json!({"name": name, "snapshotId": snapshot})))
        .collect();
    let r = server.request(
        "POST",
        "/v1/sandboxes",
        MASTER,
        Some(&json!({"template": "forked"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    clones.push(r.json()["id"].as_str().expect("id").to_string());

    let mut seen = vec![source_addr.clone()];
    for clone in &clones {
        assert_eq!(
            increment(&server, clone),
            4,
            "the fork restarted its counter"
        );
        let addr = fakenet::leased_address(clone).expect("a lease of its own");
        assert!(
            !seen.contains(&addr),
            "{addr} is another sandbox's: {seen:?}"
        );
        seen.push(addr.clone());
        assert!(fakenet::link_exists(clone) && fakenet::chain_exists(clone));
        // Its own stack sends from its own address (not the source's the image held).
        assert_eq!(
            local_probe(&server, clone, &fake.addr(2)),
            format!("ok {addr} hello")
        );
        assert_eq!(
            local_probe(&server, clone, &fake.addr(3)),
            format!("ok {addr} hello"),
            "the fork carries the source's old policy"
        );
        assert!(
            local_probe(&server, clone, &fake.addr(4)).starts_with("err"),
            "the fork is not under its workspace's policy"
        );
    }
    assert_eq!(increment(&server, &source), 4);

    for id in clones.iter().chain([&source]) {
        server.destroy(MASTER, id);
        assert_eq!(fakenet::leased_address(id), None, "lease of {id} left");
        assert!(!fakenet::link_exists(id), "veth of {id} left");
        assert!(!fakenet::chain_exists(id), "nft chain of {id} left");
    }
    let r = server.request("DELETE", &format!("/v2/snapshots/{snapshot}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());
    let r = server.request("DELETE", "/v1/sandbox-templates/forked", MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());
    common::wait_for("every sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
}
