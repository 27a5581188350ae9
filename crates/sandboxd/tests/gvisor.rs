//! The gVisor tier (runsc, ptrace platform): a sandbox runs under gVisor's kernel, the
//! unchanged agent protocol works on it (exec, files), pause/resume stop and restart it,
//! captures see its writes, and destroy leaves nothing. Skipped where runsc is missing.

mod common;
mod gvisor_common;
mod serve_bin;

use gvisor_common::*;

use futures_util::{StreamExt, TryStreamExt};
use sandboxd_agent_protocol::AgentClient;
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use sandboxd_runtime::Runtime;

#[test]
fn a_sandbox_runs_under_gvisor_serves_the_agent_protocol_and_leaves_nothing() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt
        .start(&common::spec("default"))
        .expect("start under gVisor");
    let client = AgentClient::new(handle.agent_socket.clone());

    // gVisor's kernel answers, not the host's: its dmesg is the sentry's boot banner.
    let (code, dmesg) = common::agent_sh(
        &handle,
        "dmesg 2>&1; echo rc=$?; uname -r; cat /proc/sys/kernel/hostname",
    );
    assert_eq!(code, Some(0), "{dmesg}");
    assert!(dmesg.contains("gVisor"), "not under gVisor: {dmesg}");
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("release");
    assert!(
        !dmesg.contains(host_release.trim()),
        "the host kernel answered: {dmesg}"
    );
    assert!(dmesg.lines().any(|l| l == "box"), "hostname: {dmesg}");

    // Files up and down through the agent.
    let payload = bytes::Bytes::from((0..200_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>());
    let body = futures_util::stream::once({
        let p = payload.clone();
        async move { Ok(p) }
    })
    .boxed();
    block_on(client.write_file("/root/blob.bin", 0o640, body)).expect("upload");
    let (code, out) = common::agent_sh(&handle, "wc -c < /root/blob.bin; python3 -c 'import os; print(oct(os.stat(\"/root/blob.bin\").st_mode))'");
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["200000", "0o100640"]
    );
    // One runtime for the call and its body (the connection lives on it).
    let (meta, got) = block_on(async {
        let (meta, stream) = client.read_file("/root/blob.bin").await.expect("download");
        let got: Vec<bytes::Bytes> = stream.try_collect().await.expect("body");
        (meta, got)
    });
    assert_eq!((meta.size, meta.mode & 0o7777), (200_000, 0o640));
    assert_eq!(got.concat(), payload.to_vec());

    // The write lands in the writable layer the host holds.
    let upper = handle.state_dir.join("layer/upper/root/blob.bin");
    assert_eq!(std::fs::read(&upper).expect("upper copy").len(), 200_000);

    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, &handle);
    rt.destroy(&handle).expect("destroy again");
}

#[test]
fn pause_stops_the_sandbox_and_resume_continues_it() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&common::spec("default")).expect("start");
    let (code, _) = common::agent_sh(&handle, "echo 41 > /root/n");
    assert_eq!(code, Some(0));
    rt.freeze(&handle).expect("pause");
    // Paused: the agent does not answer (its connection is accepted by the host socket
    // but nothing inside runs), so a health check does not complete.
    let paused = block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_millis(500),
            AgentClient::new(handle.agent_socket.clone()).health(),
        )
        .await
    });
    assert!(paused.is_err(), "the agent answered while paused");
    rt.freeze(&handle).expect("pausing twice");
    rt.thaw(&handle).expect("resume");
    rt.thaw(&handle).expect("resuming twice");
    let (code, out) = common::agent_sh(&handle, "echo $(( $(cat /root/n) + 1 ))");
    assert_eq!((code, out.trim()), (Some(0), "42"));

    // A capture sees the sandbox's writes (and not the agent's mount points).
    let (code, _) = common::agent_sh(&handle, "mkdir -p /srv/app && echo kept > /srv/app/f");
    assert_eq!(code, Some(0));
    let layer = rt.capture_layer(&handle).expect("capture");
    let dir = data.path().join("layers").join(&layer.digest);
    assert_eq!(
        std::fs::read_to_string(dir.join("srv/app/f")).expect("captured"),
        "kept\n"
    );
    assert!(!dir.join(".sandboxd").exists(), "agent dir captured");
    let (code, _) = common::agent_sh(&handle, "true");
    assert_eq!(code, Some(0), "running after the capture");

    // A sandbox started from the captured layer has the file.
    let mut from_snapshot = common::spec("default");
    from_snapshot.extra_layers = vec![layer.digest.clone()];
    let clone = rt.start(&from_snapshot).expect("start from the snapshot");
    let (code, out) = common::agent_sh(&clone, "cat /srv/app/f");
    assert_eq!((code, out.as_str()), (Some(0), "kept\n"));
    rt.destroy(&clone).expect("destroy the clone");
    assert_gone(&rt, &clone);

    // Destroy works on a paused sandbox too.
    rt.freeze(&handle).expect("pause");
    rt.destroy(&handle).expect("destroy paused");
    assert_gone(&rt, &handle);
    rt.delete_layer(&layer.digest).expect("delete layer");
}

#[test]
fn a_gvisor_server_creates_gvisor_sandboxes_in_every_dialect() {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    // Without default network the server keeps warm gVisor sandboxes: creates take them.
    let env = [
        ("SANDBOXD_ISOLATION", "gvisor"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    let _leftovers = ServerLeftovers(data.clone());
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &env);

    // Inngest.
    let body = serde_json::json!({"name": "gv", "vcpu": 1, "memoryMb": 256});
    let inngest = server.create_sandbox(MASTER, &body);
    let (code, out) = server.exec(MASTER, &inngest, &["/bin/dmesg"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("gVisor"),
        "Inngest sandbox not under gVisor: {out}"
    );

    // OpenRelay.
    let body = serde_json::json!({"template": "default"});
    let created = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
    assert_eq!(created.status / 100, 2, "{}", created.text());
    let openrelay = created.json()["id"].as_str().expect("id").to_owned();
    let exec = format!("/v1/sandboxes/{openrelay}/exec");
    let r = server.request(
        "POST",
        &exec,
        MASTER,
        Some(&serde_json::json!({"cmd": "dmesg"})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let stdout = r.json()["stdout"].as_str().unwrap_or_default().to_owned();
    assert!(
        stdout.contains("gVisor"),
        "OpenRelay sandbox not under gVisor: {stdout}"
    );

    // Runzivo.
    let created = server.request("POST", RUNZIVO, MASTER, Some(&serde_json::json!({})));
    assert_eq!(created.status, 201, "{}", created.text());
    let runzivo = created.json()["id"].as_str().expect("id").to_owned();
    let exec = format!("{RUNZIVO}/{runzivo}/exec");
    let r = server.request(
        "POST",
        &exec,
        MASTER,
        Some(&serde_json::json!({"cmd": "dmesg"})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let mut stdout = Vec::new();
    for line in r.text().lines().filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).expect("ndjson");
        if v["type"] == "stdout" {
            let data = v["data"].as_str().expect("data");
            stdout.extend(
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data)
                    .expect("base64"),
            );
        }
    }
    let stdout = String::from_utf8_lossy(&stdout);
    assert!(
        stdout.contains("gVisor"),
        "Runzivo sandbox not under gVisor: {stdout}"
    );

    assert!(
        !sandbox_processes_under(&data).is_empty(),
        "no runsc process for the sandboxes"
    );
    server.destroy(MASTER, &inngest);
    let del = server.request(
        "DELETE",
        &format!("/v1/sandboxes/{openrelay}"),
        MASTER,
        None,
    );
    assert_eq!(del.status / 100, 2, "{}", del.text());
    let del = server.request("DELETE", &format!("{RUNZIVO}/{runzivo}"), MASTER, None);
    assert_eq!(del.status / 100, 2, "{}", del.text());
    // The server's warm pool (entries under `.gvwarm-<key>`) stays until it stops.
    common::wait_for("every gVisor sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    common::wait_for("every state dir gone", || {
        std::fs::read_dir(data.join("sandboxes")).map_or(true, |d| {
            d.filter_map(|e| e.ok())
                .all(|e| e.file_name().to_string_lossy().starts_with(".gvwarm-"))
        })
    });
    let keys = warm_entry_keys(&data);
    drop(server);
    // Its stop drains the pool: nothing of the entries is left.
    assert_eq!(warm_entry_keys(&data), Vec::<String>::new());
    assert_eq!(processes_under(&data), Vec::<i32>::new());
    for key in &keys {
        assert_eq!(cgroups_named(key), Vec::<std::path::PathBuf>::new());
    }
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

#[test]
fn a_gvisor_server_serves_a_named_create_from_its_warm_pool_and_drains_it_at_stop() {
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
        ("SANDBOXD_WARM_INITS", "2"),
    ];
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &env);
    // Entries are made one after the other, each marked with its owner once running:
    // with both marked, the first is in the pool.
    let owned = || {
        warm_entry_keys(&data)
            .iter()
            .filter(|k| {
                data.join("sandboxes")
                    .join(format!(".gvwarm-{k}/owner"))
                    .exists()
            })
            .count()
    };
    common::wait_for("the server's warm pool filled", || owned() >= 2);

    // Inngest: the name is the hostname, set on the taken entry.
    let body = serde_json::json!({"name": "warm-named", "vcpu": 1, "memoryMb": 256});
    let id = server.create_sandbox(MASTER, &body);
    let (code, out) = server.exec(
        MASTER,
        &id,
        &["/bin/sh", "-c", "hostname; cat /proc/sys/kernel/hostname"],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["warm-named", "warm-named"],
        "{out}"
    );
    // A sandbox made from an entry runs in the entry's runsc container, recorded.
    let taken: Vec<String> = std::fs::read_dir(data.join("sandboxes"))
        .expect("sandboxes")
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| std::fs::read_to_string(e.path().join("runsc-id")).ok())
        .collect();
    assert_eq!(taken.len(), 1, "the create did not take a warm entry");

    server.destroy(MASTER, &id);
    common::wait_for("the sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    let mut keys = warm_entry_keys(&data);
    keys.extend(taken);
    drop(server);
    // The stop drains the pool: nothing of the entries (or the taken one) is left.
    assert_eq!(warm_entry_keys(&data), Vec::<String>::new());
    assert_eq!(processes_under(&data), Vec::<i32>::new());
    for key in &keys {
        assert_eq!(
            cgroups_named(key),
            Vec::<std::path::PathBuf>::new(),
            "{key}"
        );
    }
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

#[test]
fn a_gvisor_server_without_runsc_refuses_to_start_and_says_why() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = std::process::Command::new(serve_bin::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("SANDBOXD_ISOLATION", "gvisor")
        .env("SANDBOXD_METRICS_LISTEN", "none")
        .env("PATH", dir.path().join("no-such-bin"))
        .env_remove("SANDBOXD_RUNSC")
        .env("NO_COLOR", "1")
        .env_remove("SANDBOXD_MASTER_KEY")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let stderr = child.stderr.take().expect("stderr");
    let mut log = String::new();
    for line in std::io::BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
    {
        if line.contains("listening on") {
            let _ = child.kill();
            let _ = child.wait();
            panic!("served without runsc: {log}{line}");
        }
        log.push_str(&line);
        log.push('\n');
    }
    let status = child.wait().expect("wait");
    assert!(!status.success(), "{log}");
    assert!(log.contains("needs runsc"), "{log}");
}

#[test]
fn a_restarted_gvisor_server_adopts_its_running_sandboxes() {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let _leftovers = ServerLeftovers(data.clone());
    // Without default network: the server keeps warm gVisor sandboxes too.
    let env = [
        ("SANDBOXD_ISOLATION", "gvisor"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &env);
    let body = serde_json::json!({"name": "kept", "vcpu": 1, "memoryMb": 256});
    let id = server.create_sandbox(MASTER, &body);
    let (code, _) = server.exec(MASTER, &id, &["/bin/sh", "-c", "echo before > /root/f"]);
    assert_eq!(code, 0);
    // The sandbox's own processes (the server's warm pool runs under the data dir too,
    // and its drain at the stop ends those).
    let sentries = sandbox_processes_under(&data);
    assert!(!sentries.is_empty(), "no runsc process for the sandbox");
    // The sandbox's processes are those in its cgroup (a runsc command the server runs
    // now and then is in the server's).
    let cgroup = sentries
        .iter()
        .map(|pid| memory_cgroup(*pid))
        .find(|c| c.starts_with("/sandboxd/"))
        .expect("the sandbox's cgroup");
    let sentries: Vec<i32> = sentries
        .into_iter()
        .filter(|pid| memory_cgroup(*pid) == cgroup)
        .collect();
    drop(server); // SIGTERM: sandboxes keep running for the next start

    // What stays is the sandbox: its processes, all in its cgroup. A runsc command the
    // server ran may take a moment to exit after it (waited for, bounded); a warm
    // entry's sentry would stay, in a cgroup of its own, and fail this.
    let settled = || {
        let after = processes_under(&data);
        sentries.iter().all(|pid| after.contains(pid))
            && after.iter().all(|pid| memory_cgroup(*pid) == cgroup)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !settled() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let described: Vec<String> = processes_under(&data)
        .iter()
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            format!("{pid} in {}: {cmd}", memory_cgroup(*pid))
        })
        .collect();
    assert!(
        settled(),
        "the sandbox ({sentries:?} in {cgroup}) did not outlive its server, or the warm pool did: {described:#?}"
    );
    assert_eq!(warm_entry_keys(&data), Vec::<String>::new());
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &env);
    let (code, out) = server.exec(MASTER, &id, &["/bin/cat", "/root/f"]);
    assert_eq!((code, out.as_str()), (0, "before\n"));
    server.destroy(MASTER, &id);
    common::wait_for("the sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    drop(server);
    assert_eq!(processes_under(&data), Vec::<i32>::new());
}

#[test]
fn a_sandbox_past_its_memory_limit_ends_whole_and_destroy_still_cleans_it() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&common::spec("default")).expect("start"); // 256 MiB
    let usage = rt.usage(&handle).expect("usage");
    assert!(usage.pids > 0 && usage.memory_bytes > 0, "{usage:?}");
    // The host's memory cgroup holds the sentry: past the limit the host OOM-kills it,
    // and the sandbox ends (gVisor has no OOM killer of its own per process).
    let client = AgentClient::new(handle.agent_socket.clone());
    let req = sandboxd_agent_protocol::ExecRequest {
        argv: vec![
            "/usr/bin/python3".into(),
            "-c".into(),
            "b = bytearray(700 << 20)".into(),
        ],
        env: None,
        cwd: None,
        timeout_ms: 60_000,
        max_output_bytes: 1 << 16,
        user: None,
    };
    let result = block_on(client.exec(&req));
    assert!(
        result.as_ref().map_or(true, |r| r.exit_code != Some(0)),
        "allocated past the limit: {result:?}"
    );
    common::wait_for("the sandbox ended", || !rt.is_alive(&handle));
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, &handle);
}

#[test]
fn sandboxd_run_isolation_gvisor_runs_under_gvisor_within_its_disk_limit() {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().canonicalize().expect("canonical");
    let _leftovers = ServerLeftovers(data.clone());
    let script = "dmesg | head -1; \
        dd if=/dev/zero of=/root/fill bs=1M count=64 2>&1; exit 5";
    let out = std::process::Command::new(serve_bin::BIN)
        .args([
            "run",
            "--wait-cleanup",
            "--isolation",
            "gvisor",
            "--data-dir",
        ])
        .arg(&data)
        .args(["--", "/bin/sh", "-c", script])
        .env("SANDBOXD_DISK_MB_PER_SANDBOX", "32")
        .env_remove("SANDBOXD_DATA_DIR")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sandboxd run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stdout}{stderr}");
    assert!(stdout.contains("gVisor"), "not under gVisor: {stdout}");
    assert!(
        stdout.contains("No space left on device"),
        "64 MiB fit a 32 MiB disk: {stdout}"
    );
    assert_eq!(
        processes_under(&data),
        Vec::<i32>::new(),
        "runsc left running"
    );
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

#[test]
fn processes_get_signals_and_keep_their_output_under_gvisor() {
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&common::spec("default")).expect("start");
    let client = AgentClient::new(handle.agent_socket.clone());
    let id = uuid::Uuid::new_v4();
    let script = "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done";
    let start = sandboxd_agent_protocol::StartProcess {
        id,
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: None,
        cwd: None,
        hold_output: false,
        user: None,
    };
    block_on(client.start_process(&start)).expect("start process");
    common::wait_for("the process is ready", || {
        retained_output(&client, id).contains("ready")
    });
    let signal = sandboxd_agent_protocol::SignalRequest {
        signal: libc::SIGTERM,
        group: false,
    };
    block_on(client.signal(id, &signal)).expect("signal");
    let info = block_on(client.wait(id, std::time::Duration::from_secs(60))).expect("wait");
    assert_eq!(info.exit_code, Some(7), "{info:?}");
    assert_eq!(retained_output(&client, id), "ready\ngot-term\n");
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, &handle);
}

#[test]
fn reconcile_removes_a_gvisor_sandbox_no_record_keeps() {
    let data = tempfile::tempdir().expect("tempdir");
    if !GvisorRuntime::available() {
        return;
    }
    let first = raw_gvisor(data.path());
    let kept = first.start(&common::spec("default")).expect("start kept");
    let stray = first.start(&common::spec("default")).expect("start stray");
    drop(first); // a server that stops (its sandboxes run on)

    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let keep = std::collections::HashSet::from([kept.id]);
    let removed = rt.reconcile(&keep, &Default::default());
    assert_eq!(removed, vec![stray.id]);
    assert_gone(&rt, &stray);
    assert!(rt.is_alive(&kept), "reconcile ended a kept sandbox");
    let (code, _) = common::agent_sh(&kept, "true");
    assert_eq!(code, Some(0));
    rt.destroy(&kept).expect("destroy");
    assert_gone(&rt, &kept);
}

/// The terminal works (size, tty, input and output) and its end reaches the client: the
/// shell's exit code comes back in an `Exit` frame and the session closes.
#[test]
fn a_pty_terminal_works_under_gvisor() {
    use sandboxd_agent_protocol::pty::PtyFrame;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Bounds each wait, so that a session that never ends fails instead of hanging.
    const BOUND: std::time::Duration = std::time::Duration::from_secs(60);
    let data = tempfile::tempdir().expect("tempdir");
    let Some(rt) = gvisor(data.path()) else {
        return;
    };
    let handle = rt.start(&common::spec("default")).expect("start");
    let client = AgentClient::new(handle.agent_socket.clone());
    let (seen, code) = block_on(async {
        let mut io = client.open_pty(100, 30, "/").await.expect("open pty");
        let line = "stty size; tty; echo the-$((6*7))-end; exit 7\n";
        io.write_all(&PtyFrame::Data(bytes::Bytes::from(line)).encode())
            .await
            .expect("write");
        let mut buf = bytes::BytesMut::new();
        let mut seen = Vec::new();
        let code = loop {
            let mut chunk = [0u8; 4096];
            let read = tokio::time::timeout(BOUND, io.read(&mut chunk)).await;
            let text = String::from_utf8_lossy(&seen).into_owned();
            let n = read
                .unwrap_or_else(|_| panic!("the session did not end: {text}"))
                .expect("read");
            assert!(n > 0, "the PTY closed without an Exit frame: {text}");
            buf.extend_from_slice(&chunk[..n]);
            let mut code = None;
            while let Some(frame) = PtyFrame::decode(&mut buf).expect("frame") {
                match frame {
                    PtyFrame::Data(d) => seen.extend_from_slice(&d),
                    PtyFrame::Exit(c) => code = Some(c),
                    PtyFrame::Resize { .. } => {}
                }
            }
            if let Some(code) = code {
                break code;
            }
        };
        // After the Exit frame the agent closes the session.
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(BOUND, io.read_to_end(&mut rest)).await;
        assert!(
            closed.is_ok(),
            "the session stayed open after its Exit frame"
        );
        (String::from_utf8_lossy(&seen).into_owned(), code)
    });
    assert!(seen.contains("30 100"), "{seen}");
    assert!(seen.contains("/dev/pts/"), "{seen}");
    assert!(seen.contains("the-42-end"), "{seen}");
    assert_eq!(code, 7, "{seen}");
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, &handle);
}

#[test]
fn sandboxd_run_isolation_gvisor_without_runsc_says_why_and_runs_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(serve_bin::BIN)
        .args([
            "run",
            "--wait-cleanup",
            "--isolation",
            "gvisor",
            "--data-dir",
        ])
        .arg(dir.path())
        .args(["--", "/bin/sh", "-c", "echo ran-anyway"])
        .env("PATH", dir.path().join("no-such-bin"))
        .env_remove("SANDBOXD_RUNSC")
        .env_remove("SANDBOXD_DATA_DIR")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sandboxd run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        !stdout.contains("ran-anyway"),
        "ran without gVisor: {stdout}"
    );
    assert!(stderr.contains("needs runsc"), "{stderr}");
}

/// The memory cgroup `pid` is in (empty once it is gone).
fn memory_cgroup(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, path)| path.to_string()))
        .unwrap_or_default()
}
