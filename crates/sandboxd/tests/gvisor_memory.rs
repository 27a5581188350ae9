//! Memory snapshots on the gVisor tier: a sandbox paused to disk keeps every process
//! and its in-memory state through `runsc checkpoint` and `restore`, frees its host
//! memory meanwhile, and refuses (running on) when a process holds a host socket.
//! Skipped where runsc is missing.

mod common;
mod fakenet;
mod gvisor_common;
#[path = "gvisor_common/server.rs"]
mod gvisor_server;
mod serve_bin;

use gvisor_common::*;
use gvisor_server::gvisor_data;
use sandboxd_agent_protocol::AgentClient;
use sandboxd_runtime::{NetworkSpec, Runtime, SandboxHandle};

/// A shell whose counter lives in its memory, written to /root/count every 100 ms.
const COUNTER: &str =
    "n=0; while :; do n=$((n+1)); echo $n > /root/count.tmp; mv /root/count.tmp /root/count; \
     [ $n = 3 ] && echo started; sleep 0.1; done";

fn count(handle: &SandboxHandle) -> u64 {
    let path = handle.state_dir.join("layer/upper/root/count");
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Starts the counter as a managed process; returns its id once it has counted a bit.
fn start_counter(handle: &SandboxHandle) -> uuid::Uuid {
    let client = AgentClient::new(handle.agent_socket.clone());
    let id = uuid::Uuid::new_v4();
    let start = sandboxd_agent_protocol::StartProcess {
        id,
        argv: vec!["/bin/sh".into(), "-c".into(), COUNTER.into()],
        env: None,
        cwd: None,
        hold_output: false,
        user: None,
    };
    block_on(client.start_process(&start)).expect("start the counter");
    common::wait_for("the counter counts", || count(handle) >= 5);
    id
}

/// Host memory the sandbox's cgroup holds, in bytes.
fn cgroup_memory(rt: &gvisor_common::Gvisor, handle: &SandboxHandle) -> u64 {
    rt.usage(handle).expect("usage").memory_bytes
}

#[test]
fn a_sandbox_paused_to_disk_frees_its_memory_and_resumes_with_its_processes() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&common::spec("default")).expect("start");
    let counter = start_counter(&handle);
    let running_memory = cgroup_memory(&rt, &handle);

    let on_disk = rt.checkpoint(&handle).expect("pause to disk");
    assert!(rt.is_checkpointed(&on_disk));
    assert!(rt.is_alive(&on_disk), "a sandbox on disk is not ended");
    // No host process of the sandbox is left, and its memory is given back.
    assert_eq!(
        processes_naming(&handle.id.to_string()),
        Vec::<i32>::new(),
        "runsc processes left while on disk"
    );
    assert!(rt.cgroups().procs(handle.id).is_empty());
    let paused_memory = cgroup_memory(&rt, &on_disk);
    assert!(
        paused_memory < 4 << 20 && paused_memory < running_memory / 4,
        "host memory while on disk: {paused_memory} (running: {running_memory})"
    );
    let image = sandboxd_runtime::linux::gvisor::checkpoint::image_dir(&handle.state_dir);
    assert!(image.join("checkpoint.img").is_file());
    // Nothing counts on disk.
    let frozen = count(&on_disk);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(count(&on_disk), frozen, "the counter ran while on disk");
    // Pausing again changes nothing.
    assert_eq!(rt.checkpoint(&on_disk).expect("again").agent_pid, 0);

    let live = rt.restore(&on_disk).expect("restore");
    assert!(!rt.is_checkpointed(&live) && rt.is_alive(&live));
    assert_ne!(live.agent_pid, 0);
    assert!(!image.exists(), "the memory image stayed after the restore");
    // The same shell goes on counting from where it was (a new one would start at 1).
    common::wait_for("the counter continues", || count(&live) > frozen);
    let after = count(&live);
    assert!(
        after > frozen && after < frozen + 1000,
        "{frozen} -> {after}"
    );
    // The agent's memory came back too: the process is known, with its output.
    let client = AgentClient::new(live.agent_socket.clone());
    let listed = block_on(client.list_processes()).expect("list");
    assert!(
        listed
            .iter()
            .any(|p| p.id == counter && p.state == sandboxd_agent_protocol::ProcessState::Running),
        "{listed:?}"
    );
    assert_eq!(retained_output(&client, counter), "started\n");
    let (code, out) = common::agent_sh(&live, "cat /root/count");
    assert_eq!(code, Some(0), "{out}");

    // Twice over, and destroy works on disk.
    let again = rt.checkpoint(&live).expect("pause to disk again");
    let live = rt.restore(&again).expect("restore again");
    common::wait_for("the counter continues", || count(&live) > after);
    let on_disk = rt.checkpoint(&live).expect("pause to disk a third time");
    rt.destroy(&on_disk).expect("destroy on disk");
    assert_gone(&rt, &on_disk);
}

#[test]
fn a_sandbox_holding_a_host_socket_is_not_paused_to_disk_and_keeps_running() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&common::spec("default")).expect("start");
    let _counter = start_counter(&handle);
    // A server on a Unix socket on the root (host-backed): gVisor cannot save it.
    let client = AgentClient::new(handle.agent_socket.clone());
    let server = sandboxd_agent_protocol::StartProcess {
        id: uuid::Uuid::new_v4(),
        argv: vec![
            "/usr/bin/python3".into(),
            "-c".into(),
            "import socket,time\ns=socket.socket(socket.AF_UNIX)\ns.bind('/root/app.sock')\n\
             s.listen(1)\nprint('listening',flush=True)\ntime.sleep(3600)"
                .into(),
        ],
        env: None,
        cwd: None,
        hold_output: false,
        user: None,
    };
    block_on(client.start_process(&server)).expect("start the server");
    common::wait_for("the server listens", || {
        retained_output(&client, server.id).contains("listening")
    });

    let err = rt
        .checkpoint(&handle)
        .expect_err("checkpointed a host socket");
    let text = err.to_string();
    assert!(
        matches!(err, sandboxd_runtime::RuntimeError::CannotCheckpoint(_))
            && text.contains("/root/app.sock"),
        "{text}"
    );
    // Still running, the agent answering, the counter counting.
    assert!(rt.is_alive(&handle) && !rt.is_checkpointed(&handle));
    let before = count(&handle);
    common::wait_for("the counter continues", || count(&handle) > before);
    let (code, out) = common::agent_sh(&handle, "echo still-here");
    assert_eq!((code, out.as_str()), (Some(0), "still-here\n"));

    // Once the server is gone the sandbox goes to disk.
    let signal = sandboxd_agent_protocol::SignalRequest {
        signal: libc::SIGKILL,
        group: false,
    };
    block_on(client.signal(server.id, &signal)).expect("kill the server");
    block_on(client.wait(server.id, std::time::Duration::from_secs(60))).expect("wait");
    let on_disk = rt.checkpoint(&handle).expect("pause to disk");
    rt.destroy(&on_disk).expect("destroy");
    assert_gone(&rt, &on_disk);
}

/// The counter's value as the sandbox reads it (0 before its first write).
fn server_count(server: &serve_bin::Server, id: &str) -> u64 {
    let (code, out) = server.exec(
        MASTER,
        id,
        &["/bin/sh", "-c", "cat /root/count 2>/dev/null"],
    );
    assert!(code == 0 || code == 1, "{out}");
    out.trim().parse().unwrap_or(0)
}

#[test]
fn a_gvisor_server_pauses_to_disk_keeps_it_paused_across_a_restart_and_resumes_it() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let data = fixture.path.clone();
    let server = fixture.serve(MASTER, &[]);
    let body = serde_json::json!({"name": "counter", "vcpu": 1, "memoryMb": 256});
    let id = server.create_sandbox(MASTER, &body);
    let background = format!("setsid sh -c '{COUNTER}' </dev/null >/dev/null 2>&1 &");
    let (code, out) = server.exec(MASTER, &id, &["/bin/sh", "-c", &background]);
    assert_eq!(code, 0, "{out}");
    common::wait_for("the counter counts", || server_count(&server, &id) >= 5);

    let pause = format!("/v2/sandboxes/{id}/pause");
    let r = server.request("POST", &pause, MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["status"], "PAUSED", "{}", r.text());
    assert_eq!(
        sandbox_processes_under(&data),
        Vec::<i32>::new(),
        "runsc processes left while paused to disk"
    );
    let frozen =
        std::fs::read_to_string(data.join(format!("sandboxes/{id}/layer/upper/root/count")))
            .expect("count")
            .trim()
            .parse::<u64>()
            .expect("number");

    // A restarted server finds it paused (on disk), not crashed.
    drop(server);
    let server = fixture.serve(MASTER, &[]);
    let r = server.request("GET", &format!("/v2/sandboxes/{id}"), MASTER, None);
    assert_eq!(r.json()["data"]["status"], "PAUSED", "{}", r.text());

    let r = server.request("POST", &format!("/v2/sandboxes/{id}/resume"), MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["status"], "RUNNING", "{}", r.text());
    let first = server_count(&server, &id);
    assert!(
        first >= frozen,
        "the counter restarted: {frozen} -> {first}"
    );
    common::wait_for("the counter continues", || {
        server_count(&server, &id) > frozen
    });
    assert!(
        !sandbox_processes_under(&data).is_empty(),
        "no sentry after resume"
    );

    server.destroy(MASTER, &id);
    common::wait_for("the sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    common::wait_for("every state dir gone", || {
        sandbox_dir_names(&data).is_empty()
    });
    drop(server);
    // The stop drains the server's warm entries too.
    assert_eq!(
        warm_entry_keys(&data),
        Vec::<String>::new(),
        "warm entries left"
    );
    assert_eq!(
        processes_under(&data),
        Vec::<i32>::new(),
        "runsc processes left"
    );
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

#[test]
fn two_sandboxes_started_from_one_memory_snapshot_each_continue_the_processes() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let source = rt.start(&common::spec("default")).expect("start");
    let counter = start_counter(&source);
    let (snapshot, source) = rt.snapshot_memory(&source, uuid::Uuid::new_v4());
    let snapshot = snapshot.expect("snapshot");
    // The counter as the snapshot holds it (its layer is the writable layer then).
    let captured = data.path().join("layers").join(&snapshot.layer.digest);
    let taken: u64 = std::fs::read_to_string(captured.join("root/count"))
        .expect("count in the snapshot's layer")
        .trim()
        .parse()
        .expect("number");
    // The source runs on.
    common::wait_for("the source continues", || count(&source) > taken);

    let mut spec = common::spec("default");
    spec.extra_layers = vec![snapshot.layer.digest.clone()];
    let clones: Vec<SandboxHandle> = (0..2)
        .map(|i| {
            let mut spec = spec.clone();
            spec.id = uuid::Uuid::new_v4();
            spec.hostname = format!("clone-{i}");
            rt.start_from_memory(&spec, &NetworkSpec::none(), &snapshot.image)
                .expect("start a clone")
        })
        .collect();
    for (i, clone) in clones.iter().enumerate() {
        // Its own hostname, not the source's (which the memory image holds).
        let (code, out) = common::agent_sh(clone, "cat /proc/sys/kernel/hostname");
        assert_eq!((code, out.trim()), (Some(0), format!("clone-{i}").as_str()));
        assert_ne!(clone.id, source.id);
        // The same shell, from where the snapshot was taken (a new one starts at 1).
        common::wait_for("the clone counts", || count(clone) > 0);
        let first = count(clone);
        assert!(
            first > taken,
            "the clone's counter restarted: {taken} -> {first}"
        );
        let client = AgentClient::new(clone.agent_socket.clone());
        assert_eq!(retained_output(&client, counter), "started\n");
    }
    // Each has a writable layer of its own.
    let (code, _) = common::agent_sh(&clones[0], "echo mine > /root/only-in-first");
    assert_eq!(code, Some(0));
    let (code, out) = common::agent_sh(&clones[1], "cat /root/only-in-first 2>&1");
    assert_ne!(
        code,
        Some(0),
        "the second clone sees the first's write: {out}"
    );
    assert!(!source
        .state_dir
        .join("layer/upper/root/only-in-first")
        .exists());

    for handle in clones.iter().chain([&source]) {
        rt.destroy(handle).expect("destroy");
        assert_gone(&rt, handle);
    }
    rt.delete_layer(&snapshot.layer.digest)
        .expect("delete layer");
    rt.delete_memory_snapshot(&snapshot.image)
        .expect("remove the snapshot");
    assert!(!snapshot.image.exists());
}

/// "ok <own address> hello" or "err ...": a TCP connect from inside sandbox `id`.
fn local_probe(server: &serve_bin::Server, id: &str, host: &str) -> String {
    let args = ["/usr/bin/python3", "-c", fakenet::LOCAL_PROBE, host, "8080"];
    let (code, out) = server.exec(MASTER, id, &args);
    assert_eq!(code, 0, "probe failed: {out}");
    out.trim().to_string()
}

/// A sandbox with egress holding a connection pauses and resumes whole. With a runsc
/// that has `--net-disconnect-ok` it goes to disk (image written, no host process left,
/// its namespace, link, lease and rules kept across a server restart) and comes back
/// with its processes, memory, address and policy, the held connection reset by the
/// save. With an older runsc (which cannot save such a connection: a checkpoint that
/// met one ended the sandbox, a 503) it pauses in memory and the connection survives.
/// Either way the connection's holder runs on and reports what its socket says after.
#[test]
fn a_gvisor_sandbox_with_egress_holding_a_connection_pauses_and_resumes_whole() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let to_disk = runsc_disconnects();
    let data = fixture.path.clone();
    let fake = fakenet::FakeNet::new();
    let resolver = fake.addr(2);
    let env = [
        ("SANDBOXD_NETWORK", "egress"),
        ("SANDBOXD_RESOLVERS", resolver.as_str()),
    ];
    let server = fixture.serve(MASTER, &env);
    let allow = format!("{}.0/29", fake.prefix);
    let policy = [
        "network-policy",
        "set",
        "--workspace",
        "default",
        "--allow",
        &allow,
        "--deny",
        &fake.addr(3),
        "--data-dir",
        data.to_str().expect("utf-8"),
    ];
    let set = serve_bin::cli(&policy, "");
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let body = serde_json::json!({"name": "counter", "vcpu": 1, "memoryMb": 256});
    let id = server.create_sandbox(MASTER, &body);
    assert!(
        data.join(format!("sandboxes/{id}/netns")).exists(),
        "the sandbox has no network namespace of its own"
    );
    let addr = fakenet::leased_address(&id).expect("a lease");
    let reached = format!("ok {addr} hello");
    assert_eq!(local_probe(&server, &id, &fake.addr(2)), reached);
    assert!(local_probe(&server, &id, &fake.addr(3)).starts_with("err"));
    let background = format!("setsid sh -c '{COUNTER}' </dev/null >/dev/null 2>&1 &");
    let (code, out) = server.exec(MASTER, &id, &["/bin/sh", "-c", &background]);
    assert_eq!(code, 0, "{out}");
    common::wait_for("the counter counts", || server_count(&server, &id) >= 5);

    // A connection to the allowed fake host (which sent "hello" and closed its end),
    // held by a process across the pause, which reads and writes it once told to.
    let hold = format!(
        "import socket,time,os\ns=socket.create_connection(('{}', 8080))\n\
         open('/root/connected','w').close()\n\
         while not os.path.exists('/root/go'): time.sleep(0.05)\n\
         try: r=repr(s.recv(16))\nexcept Exception as e: r=type(e).__name__\n\
         try: s.send(b'x'); w='sent'\nexcept Exception as e: w=type(e).__name__\n\
         open('/root/result','w').write(r+' '+w)\ntime.sleep(3600)\n",
        fake.addr(2)
    );
    let launch = format!(
        "printf '%s' \"{hold}\" > /root/hold.py && \
         (setsid python3 /root/hold.py </dev/null >/dev/null 2>&1 &) && \
         while [ ! -e /root/connected ]; do sleep 0.05; done"
    );
    let (code, out) = server.exec(MASTER, &id, &["/bin/sh", "-c", &launch]);
    assert_eq!(code, 0, "{out}");

    let r = server.request("POST", &format!("/v2/sandboxes/{id}/pause"), MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["status"], "PAUSED", "{}", r.text());
    let server = if to_disk {
        assert!(
            data.join(format!("sandboxes/{id}/memory/checkpoint.img"))
                .is_file(),
            "no memory image: it did not go to disk"
        );
        assert_eq!(
            sandbox_processes_under(&data),
            Vec::<i32>::new(),
            "runsc processes left while paused to disk"
        );
        // Its host side stays while it is on disk, across a server restart.
        assert_eq!(fakenet::leased_address(&id).as_deref(), Some(addr.as_str()));
        assert!(fakenet::link_exists(&id) && fakenet::nft_entries_exist(&id));
        drop(server);
        let server = fixture.serve(MASTER, &env);
        assert_eq!(fakenet::leased_address(&id).as_deref(), Some(addr.as_str()));
        server
    } else {
        assert!(
            !data.join(format!("sandboxes/{id}/memory")).exists(),
            "a memory image was written"
        );
        assert!(
            !sandbox_processes_under(&data).is_empty(),
            "the sentry is gone: it went to disk"
        );
        server
    };
    let r = server.request("POST", &format!("/v2/sandboxes/{id}/resume"), MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["status"], "RUNNING", "{}", r.text());
    let resumed = server_count(&server, &id);
    common::wait_for("the counter continues", || {
        server_count(&server, &id) > resumed
    });
    let (code, out) = server.exec(
        MASTER,
        &id,
        &["/bin/sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("/root/hold.py"),
        "the connection's holder is gone: {out}"
    );
    let (code, out) = server.exec(
        MASTER,
        &id,
        &[
            "/bin/sh",
            "-c",
            "touch /root/go; while [ ! -s /root/result ]; do sleep 0.05; done; cat /root/result",
        ],
    );
    assert_eq!(code, 0, "{out}");
    match to_disk {
        // Reset by the save: reading it says aborted, writing it a broken pipe.
        true => assert_eq!(
            out.trim(),
            "ConnectionAbortedError BrokenPipeError",
            "the held connection after the save"
        ),
        false => assert_eq!(out.trim(), "b'hello' sent", "the held connection"),
    }
    assert_eq!(local_probe(&server, &id, &fake.addr(2)), reached);
    assert!(
        local_probe(&server, &id, &fake.addr(3)).starts_with("err"),
        "the denied address is reachable after the resume"
    );
    // Its snapshot keeps its memory when it can go to disk (else its files only), and
    // the sandbox runs on.
    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{id}/snapshots"),
        MASTER,
        None,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["data"]["memory"], to_disk, "{}", r.text());
    let snapshot = r.json()["data"]["id"].as_str().expect("id").to_string();
    assert_eq!(local_probe(&server, &id, &fake.addr(2)), reached);
    let r = server.request("DELETE", &format!("/v2/snapshots/{snapshot}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());

    server.destroy(MASTER, &id);
    common::wait_for("the sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    assert_eq!(fakenet::leased_address(&id), None, "lease left behind");
    assert!(!fakenet::link_exists(&id), "veth left behind");
    assert!(!fakenet::nft_entries_exist(&id), "nft entries left behind");
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

/// A memory snapshot whose restore fails after its image was taken returns no snapshot,
/// so it keeps no image either (nothing would ever name or delete it); the sandbox
/// stays on disk, whole, and a later restore brings it back.
#[test]
fn a_memory_snapshot_whose_restore_fails_leaves_no_image() {
    let scenario = fail::FailScenario::setup();
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&common::spec("default")).expect("start");
    start_counter(&handle);
    fail::cfg("snapshot_memory.restore", "return").expect("failpoint");
    let (taken, now) = rt.snapshot_memory(&handle, uuid::Uuid::new_v4());
    fail::remove("snapshot_memory.restore");
    assert!(taken.is_err(), "{taken:?}");
    let images: Vec<_> = std::fs::read_dir(rt.memory_snapshots_dir())
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(images, Vec::<std::path::PathBuf>::new());
    assert!(rt.is_checkpointed(&now));
    let live = rt.restore(&now).expect("restore");
    let before = count(&live);
    common::wait_for("the counter continues", || count(&live) > before);
    rt.destroy(&live).expect("destroy");
    assert_gone(&rt, &live);
    scenario.teardown();
}

/// A frozen sandbox whose checkpoint is given up before it ran (its agent did not let
/// go of its socket in time) is frozen again, as its owner left it, and answers once
/// thawed.
#[test]
fn a_frozen_sandbox_whose_checkpoint_is_given_up_is_frozen_again() {
    let scenario = fail::FailScenario::setup();
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&common::spec("default")).expect("start");
    rt.freeze(&handle).expect("freeze");
    fail::cfg("checkpoint.quiesce", "return").expect("failpoint");
    let err = rt.checkpoint(&handle).expect_err("checkpointed");
    fail::remove("checkpoint.quiesce");
    let frozen = rt.is_paused(&handle);
    rt.thaw(&handle).expect("thaw");
    let (code, out) = common::agent_sh(&handle, "echo still-here");
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, &handle);
    scenario.teardown();
    assert!(
        matches!(err, sandboxd_runtime::RuntimeError::CannotCheckpoint(_)),
        "{err}"
    );
    assert!(frozen, "the sandbox runs after its checkpoint was given up");
    assert_eq!((code, out.as_str()), (Some(0), "still-here\n"));
}

/// A server killed in the middle of a restore from disk (the sentry restored and
/// running, the handle and the image still saying on disk) leaves a sentry nothing
/// manages: the next server's start-up ends it and its runsc state, and the sandbox,
/// still on disk, restores from its image.
#[test]
fn a_restore_a_killed_server_left_running_is_ended_at_start_up() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&common::spec("default")).expect("start");
    start_counter(&handle);
    let on_disk = rt.checkpoint(&handle).expect("checkpoint");
    let image = sandboxd_runtime::linux::gvisor::checkpoint::image_dir(&on_disk.state_dir);
    let aside = data.path().join("image-aside");
    let cp = |from: &std::path::Path, to: &std::path::Path| {
        let ok = std::process::Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(to)
            .status()
            .expect("cp");
        assert!(ok.success(), "cp {} {}", from.display(), to.display());
    };
    cp(&image, &aside);
    let _live = rt.restore(&on_disk).expect("restore");
    // Killed before it recorded the restore: the image and the handle on disk stay.
    cp(&aside, &image);
    std::fs::remove_dir_all(&aside).expect("image aside");
    std::fs::write(
        on_disk.state_dir.join("handle.json"),
        serde_json::to_vec_pretty(&on_disk).expect("json"),
    )
    .expect("handle");
    assert!(
        !rt.cgroups().procs(on_disk.id).is_empty(),
        "no restored sentry"
    );

    let keep: std::collections::HashSet<_> = [on_disk.id].into();
    rt.reconcile(&keep, &Default::default());
    assert_eq!(rt.cgroups().procs(on_disk.id), Vec::<i32>::new());
    assert!(rt.is_checkpointed(&on_disk));
    let live = rt.restore(&on_disk).expect("restore after the start-up");
    let before = count(&live);
    common::wait_for("the counter continues", || count(&live) > before);
    rt.destroy(&live).expect("destroy");
    assert_gone(&rt, &live);
}
