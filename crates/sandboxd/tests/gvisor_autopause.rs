//! autoPause on the gVisor tier: under an artificially small memory budget, the idle
//! sandboxes that consented go to disk (their host memory freed), the one idle the
//! longest first; the next operation wakes them with their processes' memory intact,
//! concurrent ones all waiting for one restore; a sandbox that did not consent stays;
//! expiry ends a sandbox on disk; a restarted server still wakes one. Skipped where
//! runsc is missing.

mod common;
mod fakenet;
mod gvisor_common;
#[path = "gvisor_common/server.rs"]
mod gvisor_server;
mod serve_bin;

use gvisor_common::*;
use gvisor_server::gvisor_data;
use sandboxd_engine::{
    AutoPause, CreateSandbox, Engine, EngineConfig, ExecCommand, Limits, NetworkMode, ProcessExit,
    Resources, Sandbox, SandboxStatus, StartCommand,
};
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use sandboxd_runtime::Runtime;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

const WS: &str = "autopause";

/// A Python process whose counter lives only in its memory, written out every 100 ms
/// (a restarted process would count from 1 again).
const COUNTER: &str = "import time\nn = 0\nwhile True:\n    n += 1\n    \
    open('/root/count.tmp', 'w').write(str(n))\n    \
    __import__('os').replace('/root/count.tmp', '/root/count')\n    time.sleep(0.1)\n";

/// An engine over the gVisor tier with a 1 MiB budget (every resident sandbox is past
/// it); no background sweep unless `interval` is given: the tests sweep themselves.
struct Fixture {
    data: PathBuf,
    rt: Arc<GvisorRuntime>,
    store: Arc<sandboxd_store::SqliteStore>,
    limits: Limits,
    engine: Arc<Engine>,
    _dir: tempfile::TempDir,
}

impl Fixture {
    fn new(interval: Duration) -> Option<Fixture> {
        Fixture::with(AutoPause {
            memory_budget_mb: 1,
            min_available_mb: 0,
            interval,
        })
    }

    fn with(auto_pause: AutoPause) -> Option<Fixture> {
        if !GvisorRuntime::available() {
            eprintln!("runsc is not installed: skipping");
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().canonicalize().expect("canonical data dir");
        let rt = Arc::new(raw_gvisor(&data));
        let store = sandboxd_store::SqliteStore::open(data.join("sandboxd.db")).expect("store");
        let store = Arc::new(store);
        let limits = Limits {
            default_network: NetworkMode::None,
            auto_pause,
            isolation: sandboxd_runtime::Isolation::Gvisor,
            ..Limits::default()
        };
        let engine = open(&data, &rt, &store, limits);
        Some(Fixture {
            data,
            rt,
            store,
            limits,
            engine,
            _dir: dir,
        })
    }

    /// Stops the engine (its watches and tasks end with it): a server that stopped.
    fn stop(&mut self) {
        let beside = Engine::open_beside(EngineConfig {
            data_dir: self.data.clone(),
            runtime: self.rt.clone(),
            store: self.store.clone(),
            limits: self.limits,
        });
        self.engine = beside.expect("engine");
    }

    /// A new engine over the same store and runtime: a server restart.
    fn reopen(&mut self) {
        self.engine = open(&self.data, &self.rt, &self.store, self.limits);
    }

    fn ws(&self) -> String {
        WS.to_owned()
    }

    async fn create(&self, auto_pause: bool, timeout: Option<Duration>) -> Sandbox {
        let req = CreateSandbox {
            name: None,
            resources: Resources {
                vcpu: 1,
                memory_mb: 256,
            },
            image: None,
            snapshot_id: None,
            environment: BTreeMap::new(),
            secrets: Vec::new(),
            metadata: BTreeMap::new(),
            timeout,
            auto_pause,
            isolation: None,
            network: None,
            egress: None,
            disk_mb: None,
            aliases: Default::default(),
            attributes: Default::default(),
        };
        self.engine.create(&self.ws(), req).await.expect("create").0
    }

    async fn sh(&self, id: Uuid, script: &str) -> String {
        let cmd = ExecCommand {
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            env: None,
            cwd: None,
            timeout: Duration::from_secs(60),
            max_output_bytes: 1 << 20,
        };
        let r = self.engine.exec(&self.ws(), id, cmd).await.expect("exec");
        let out = String::from_utf8_lossy(&r.stdout).into_owned();
        assert_eq!(r.exit, Some(ProcessExit::Code(0)), "{out}");
        out
    }

    async fn start_counter(&self, id: Uuid) {
        let start = StartCommand {
            argv: vec!["/usr/bin/python3".into(), "-c".into(), COUNTER.into()],
            env: None,
            cwd: None,
        };
        self.engine
            .start_process(&self.ws(), id, start)
            .await
            .expect("start the counter");
        common::wait_for("the counter counts", || self.count(id) >= 3);
    }

    /// The counter as the sandbox's writable layer holds it (read on the host: no
    /// operation on the sandbox).
    fn count(&self, id: Uuid) -> u64 {
        let path = self
            .data
            .join(format!("sandboxes/{id}/layer/upper/root/count"));
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    async fn get(&self, id: Uuid) -> Sandbox {
        self.engine.get(&self.ws(), id).await.expect("get")
    }

    /// Host memory the sandbox's cgroup holds, in bytes (read without waking it).
    async fn memory(&self, id: Uuid) -> u64 {
        let usage = self.engine.usage(&self.ws(), id).await.expect("usage");
        usage.memory_bytes
    }

    async fn destroy_all(&self, ids: &[Uuid]) {
        for &id in ids {
            self.engine.destroy(&self.ws(), id).await.expect("destroy");
        }
        for &id in ids {
            assert_eq!(processes_naming(&id.to_string()), Vec::<i32>::new());
            assert!(!self.data.join(format!("sandboxes/{id}")).exists());
        }
    }
}

fn open(
    data: &std::path::Path,
    rt: &Arc<GvisorRuntime>,
    store: &Arc<sandboxd_store::SqliteStore>,
    limits: Limits,
) -> Arc<Engine> {
    Engine::open(EngineConfig {
        data_dir: data.to_path_buf(),
        runtime: rt.clone(),
        store: store.clone(),
        limits,
    })
    .expect("engine")
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for handle in self.rt.stored_handles() {
            let _ = self.rt.destroy(&handle);
        }
        self.rt.cgroups().remove_parent_if_unused();
    }
}

/// A runtime for the engine (its tasks run while a test awaits).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio")
}

/// The memory image of a sandbox on disk.
fn image(data: &std::path::Path, id: Uuid) -> PathBuf {
    sandboxd_runtime::linux::gvisor::checkpoint::image_dir(&data.join(format!("sandboxes/{id}")))
        .join("checkpoint.img")
}

#[test]
fn an_idle_consenting_sandbox_goes_to_disk_and_an_exec_wakes_it_with_its_memory() {
    runtime().block_on(async {
        let Some(f) = Fixture::new(Duration::ZERO) else {
            return;
        };
        let willing = f.create(true, None).await;
        let unwilling = f.create(false, None).await;
        f.start_counter(willing.id).await;
        f.start_counter(unwilling.id).await;
        let resident = f.memory(willing.id).await;

        // Past the budget: the consenting one goes, the other never does.
        assert_eq!(f.engine.auto_pause_sweep().await, vec![willing.id]);
        assert_eq!(f.engine.auto_pause_sweep().await, Vec::<Uuid>::new());
        let on_disk = f.get(willing.id).await;
        assert_eq!(
            on_disk.status,
            SandboxStatus::Running,
            "not its owner's pause"
        );
        assert!(on_disk.auto_paused_at.is_some());
        assert!(image(&f.data, willing.id).is_file(), "no memory image");
        assert_eq!(
            processes_naming(&willing.id.to_string()),
            Vec::<i32>::new(),
            "runsc processes left while on disk"
        );
        let freed = f.memory(willing.id).await;
        assert!(
            freed < 4 << 20 && freed < resident / 4,
            "host memory on disk: {freed} (resident: {resident})"
        );
        let frozen = f.count(willing.id);
        assert!(!processes_naming(&unwilling.id.to_string()).is_empty());
        assert!(f.get(unwilling.id).await.auto_paused_at.is_none());
        let before = f.count(unwilling.id);
        common::wait_for("the other counts on", || f.count(unwilling.id) > before);

        // The next exec waits for the restore; the same process counts on.
        let out = f
            .sh(
                willing.id,
                "a=$(cat /root/count); sleep 0.5; echo $a $(cat /root/count)",
            )
            .await;
        let seen: Vec<u64> = out
            .split_whitespace()
            .map(|n| n.parse().expect("number"))
            .collect();
        assert!(
            seen[0] >= frozen && seen[1] > seen[0] && seen[1] < frozen + 1000,
            "the counter restarted or stood still: on disk {frozen}, then {seen:?}"
        );
        let woken = f.get(willing.id).await;
        assert!(woken.auto_paused_at.is_none());
        assert!(!image(&f.data, willing.id).exists(), "the image stayed");

        f.destroy_all(&[willing.id, unwilling.id]).await;
    });
}

/// Without a budget, the host's own shortage (`MemAvailable` under the minimum; here
/// always) moves consenting sandboxes.
#[test]
fn a_host_short_of_memory_moves_consenting_sandboxes() {
    runtime().block_on(async {
        let host_short = AutoPause {
            memory_budget_mb: 0,
            min_available_mb: u64::MAX,
            interval: Duration::ZERO,
        };
        let Some(f) = Fixture::with(host_short) else {
            return;
        };
        let willing = f.create(true, None).await;
        let unwilling = f.create(false, None).await;
        assert_eq!(f.engine.auto_pause_sweep().await, vec![willing.id]);
        assert!(image(&f.data, willing.id).is_file());
        assert_eq!(f.sh(willing.id, "echo awake").await, "awake\n");
        f.destroy_all(&[willing.id, unwilling.id]).await;
    });
}

/// A sandbox whose log a client follows, or whose terminal is open, is in use: it
/// stays until the stream ends.
#[test]
fn a_followed_log_or_an_open_terminal_keeps_a_sandbox_in_memory() {
    runtime().block_on(async {
        let Some(f) = Fixture::new(Duration::ZERO) else {
            return;
        };
        let sb = f.create(true, None).await;
        let logs = f
            .engine
            .logs(&f.ws(), sb.id, true)
            .await
            .expect("follow logs");
        assert_eq!(f.engine.auto_pause_sweep().await, Vec::<Uuid>::new());
        drop(logs);
        let terminal = f.engine.open_terminal(&f.ws(), sb.id, 80, 24).await;
        let terminal = terminal.expect("open a terminal");
        assert_eq!(f.engine.auto_pause_sweep().await, Vec::<Uuid>::new());
        drop(terminal);
        assert_eq!(f.engine.auto_pause_sweep().await, vec![sb.id]);
        f.destroy_all(&[sb.id]).await;
    });
}

#[test]
fn the_sandbox_idle_the_longest_goes_to_disk_first() {
    runtime().block_on(async {
        let Some(f) = Fixture::new(Duration::ZERO) else {
            return;
        };
        let first = f.create(true, None).await;
        let second = f.create(true, None).await;
        // The older one was used last: the younger has been idle longer.
        f.sh(second.id, "true").await;
        f.sh(first.id, "true").await;
        assert_eq!(f.engine.auto_pause_sweep().await, vec![second.id, first.id]);
        // Woken in the other order, they go in the other order.
        f.sh(first.id, "true").await;
        f.sh(second.id, "true").await;
        assert_eq!(f.engine.auto_pause_sweep().await, vec![first.id, second.id]);
        f.destroy_all(&[first.id, second.id]).await;
    });
}

#[test]
fn concurrent_operations_on_a_sandbox_on_disk_all_wait_for_one_restore() {
    runtime().block_on(async {
        let Some(f) = Fixture::new(Duration::ZERO) else {
            return;
        };
        let sb = f.create(true, None).await;
        f.start_counter(sb.id).await;
        assert_eq!(f.engine.auto_pause_sweep().await, vec![sb.id]);
        let frozen = f.count(sb.id);
        let ops = (0..6).map(|i| {
            let f = &f;
            async move {
                match i % 3 {
                    0 => f.sh(sb.id, &format!("echo {i}")).await.trim().to_owned(),
                    1 => {
                        let page = sandboxd_engine::PageRequest {
                            limit: 100,
                            cursor: None,
                        };
                        let procs = f.engine.list_processes(&f.ws(), sb.id, page).await;
                        format!("{}", procs.expect("list processes").items.len())
                    }
                    _ => {
                        let read = f.engine.read_file(&f.ws(), sb.id, "/root/count").await;
                        let (meta, _) = read.expect("read a file");
                        format!("{}", meta.size)
                    }
                }
            }
        });
        let answers = futures_util::future::join_all(ops).await;
        assert_eq!(answers[0], "0");
        assert_eq!(answers[3], "3");
        assert!(answers[1] != "0" && answers[4] != "0", "{answers:?}");
        assert!(f.get(sb.id).await.auto_paused_at.is_none());
        common::wait_for("the counter continues", || f.count(sb.id) > frozen);
        f.destroy_all(&[sb.id]).await;
    });
}

/// A server that stops after the checkpoint but before recording it (a shutdown in
/// the middle of a sweep) finds the sandbox on disk, not crashed, and wakes it.
#[test]
fn a_move_to_disk_the_server_did_not_record_is_found_on_disk_after_a_restart() {
    runtime().block_on(async {
        let Some(mut f) = Fixture::new(Duration::ZERO) else {
            return;
        };
        let sb = f.create(true, None).await;
        f.start_counter(sb.id).await;
        let handle = f.rt.stored_handles().into_iter().find(|h| h.id == sb.id);
        f.stop();
        let rt = f.rt.clone();
        let on_disk = tokio::task::spawn_blocking(move || rt.checkpoint(&handle.expect("handle")))
            .await
            .expect("join")
            .expect("checkpoint");
        assert!(f.rt.is_checkpointed(&on_disk));
        let frozen = f.count(sb.id);

        f.reopen();
        let found = f.get(sb.id).await;
        assert_eq!(found.status, SandboxStatus::Running, "{found:?}");
        assert!(found.auto_paused_at.is_some(), "{found:?}");
        let out = f.sh(sb.id, "cat /root/count").await;
        let first: u64 = out.trim().parse().expect("number");
        assert!(
            first >= frozen,
            "the counter restarted: {frozen} -> {first}"
        );
        common::wait_for("the counter continues", || f.count(sb.id) > frozen);
        f.destroy_all(&[sb.id]).await;
    });
}

#[test]
fn a_sandbox_on_disk_expires_and_leaves_no_image() {
    // The background sweep this time (every 100 ms), and the expiry task.
    runtime().block_on(async {
        let Some(f) = Fixture::new(Duration::from_millis(100)) else {
            return;
        };
        let sb = f.create(true, Some(Duration::from_secs(4))).await;
        common::wait_for("the sandbox on disk", || image(&f.data, sb.id).is_file());
        loop {
            let now = f.get(sb.id).await;
            if now.status.is_terminal() {
                assert_eq!(now.status, SandboxStatus::Terminated, "{now:?}");
                assert_eq!(now.end_reason, Some(sandboxd_engine::EndReason::Timeout));
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(!f.data.join(format!("sandboxes/{}", sb.id)).exists());
        assert_eq!(processes_naming(&sb.id.to_string()), Vec::<i32>::new());
    });
}

/// Over HTTP, OpenRelay's `autoPause`: the server's own sweep moves the sandbox to
/// disk, its view still says `running`, and after a server restart the next exec
/// wakes it with its processes' memory.
#[test]
fn an_openrelay_auto_pause_sandbox_on_disk_wakes_after_a_server_restart() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let data = fixture.path.clone();
    let env = [
        ("SANDBOXD_AUTO_PAUSE_MEMORY_BUDGET_MB", "1"),
        ("SANDBOXD_AUTO_PAUSE_INTERVAL_MS", "200"),
    ];
    let server = fixture.serve(MASTER, &env);
    let body = serde_json::json!({"template": "default", "autoPause": true});
    let created = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
    assert_eq!(created.status / 100, 2, "{}", created.text());
    let id = created.json()["id"].as_str().expect("id").to_owned();
    let exec = format!("/v1/sandboxes/{id}/exec");
    // Started and seen counting within one exec: the sandbox is busy until then.
    let start = format!(
        "cat > /root/counter.py <<'EOF'\n{COUNTER}EOF\n\
         setsid python3 /root/counter.py </dev/null >/dev/null 2>&1 &\n\
         while [ ! -s /root/count ]; do sleep 0.1; done"
    );
    let r = server.request(
        "POST",
        &exec,
        MASTER,
        Some(&serde_json::json!({"cmd": start})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["exitCode"], 0, "{}", r.text());
    let count = || -> u64 {
        std::fs::read_to_string(data.join(format!("sandboxes/{id}/layer/upper/root/count")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let image = image(&data, id.parse().expect("uuid"));
    let path = format!("/v1/sandboxes/{id}");
    common::wait_for("the sandbox recorded on disk", || {
        server.request("GET", &path, MASTER, None).json()["autoPausedAt"].is_string()
    });
    assert!(image.is_file() && sandbox_processes_under(&data).is_empty());
    let view = server.request("GET", &path, MASTER, None);
    assert_eq!(view.json()["state"], "running", "{}", view.text());
    assert_eq!(view.json()["autoPause"], true, "{}", view.text());
    let frozen = count();

    drop(server);
    let env = [("SANDBOXD_AUTO_PAUSE_MEMORY_BUDGET_MB", "0")];
    let server = fixture.serve(MASTER, &env);
    assert!(image.is_file(), "the restart woke it");
    let cmd = "a=$(cat /root/count); sleep 0.5; echo $a $(cat /root/count)";
    let r = server.request(
        "POST",
        &exec,
        MASTER,
        Some(&serde_json::json!({"cmd": cmd})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let out = r.json()["stdout"].as_str().unwrap_or_default().to_owned();
    let seen: Vec<u64> = out
        .split_whitespace()
        .map(|n| n.parse().expect("number"))
        .collect();
    assert!(
        seen.len() == 2 && seen[0] >= frozen && seen[1] > seen[0] && seen[1] < frozen + 1000,
        "the counter restarted or stood still: on disk {frozen}, then {out:?}"
    );
    assert!(
        !sandbox_processes_under(&data).is_empty(),
        "no sentry after the wake"
    );
    let view = server.request("GET", &path, MASTER, None);
    assert!(view.json().get("autoPausedAt").is_none(), "{}", view.text());

    let del = server.request("DELETE", &format!("/v1/sandboxes/{id}"), MASTER, None);
    assert_eq!(del.status / 100, 2, "{}", del.text());
    common::wait_for("the sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    common::wait_for("every state dir gone", || {
        sandbox_dir_names(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

/// The sandbox directories of a server's data dir (its warm gVisor entries left out).
fn sandbox_dirs(data: &std::path::Path) -> std::collections::BTreeSet<String> {
    sandbox_dir_names(data).into_iter().collect()
}

/// Runzivo's `auto_pause` and Inngest's `autoPause` (extensions) consent too; a sandbox
/// that did not consent stays in memory although it has been idle the longest.
#[test]
fn runzivo_and_inngest_sandboxes_consent_with_their_extension_fields() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let data = fixture.path.clone();
    let env = [
        ("SANDBOXD_AUTO_PAUSE_MEMORY_BUDGET_MB", "1"),
        ("SANDBOXD_AUTO_PAUSE_INTERVAL_MS", "200"),
    ];
    let server = fixture.serve(MASTER, &env);
    let made = |create: &dyn Fn() -> String| -> (String, String) {
        let before = sandbox_dirs(&data);
        let id = create();
        let after = sandbox_dirs(&data);
        let new: Vec<_> = after.difference(&before).cloned().collect();
        assert_eq!(new.len(), 1, "{new:?}");
        (id, new[0].clone())
    };
    let runzivo = |body: serde_json::Value| {
        let r = server.request("POST", RUNZIVO, MASTER, Some(&body));
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["id"].as_str().expect("id").to_owned()
    };
    let (unwilling, unwilling_dir) = made(&|| runzivo(serde_json::json!({})));
    let (willing, willing_dir) = made(&|| runzivo(serde_json::json!({"auto_pause": true})));
    let (inngest, inngest_dir) = made(&|| {
        let body = serde_json::json!({"name": "ap", "vcpu": 1, "memoryMb": 256, "autoPause": true});
        server.create_sandbox(MASTER, &body)
    });
    let on_disk = |d: &str| image(&data, d.parse().expect("uuid")).is_file();
    common::wait_for("both consenting sandboxes on disk", || {
        on_disk(&willing_dir) && on_disk(&inngest_dir)
    });
    assert!(!on_disk(&unwilling_dir));
    assert!(!processes_naming(&unwilling_dir).is_empty());

    // A Runzivo exec wakes its sandbox.
    let exec = format!("{RUNZIVO}/{willing}/exec");
    let r = server.request(
        "POST",
        &exec,
        MASTER,
        Some(&serde_json::json!({"cmd": "echo awake"})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("\"exit\""), "{}", r.text());

    for id in [&unwilling, &willing] {
        let del = server.request("DELETE", &format!("{RUNZIVO}/{id}"), MASTER, None);
        assert_eq!(del.status / 100, 2, "{}", del.text());
    }
    server.destroy(MASTER, &inngest);
    common::wait_for("the sandboxes gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    common::wait_for("every state dir gone", || sandbox_dirs(&data).is_empty());
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

/// A sandbox with egress moves too, with a runsc that has `--net-disconnect-ok` (HTTP, OpenRelay's `autoPause` and `egress`): on disk
/// it keeps its lease, link and rules, and the exec that wakes it finds its processes,
/// its address and its policy (the denied fake host still refused).
#[test]
fn an_egress_sandbox_moves_to_disk_and_wakes_with_its_address_and_policy() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    if !runsc_disconnects() {
        eprintln!("skipping: an egress sandbox stays in memory on this runsc");
        return;
    }
    let data = fixture.path.clone();
    let fake = fakenet::FakeNet::new();
    let resolver = fake.addr(2);
    let env = [
        ("SANDBOXD_NETWORK", "egress"),
        ("SANDBOXD_RESOLVERS", resolver.as_str()),
        ("SANDBOXD_AUTO_PAUSE_MEMORY_BUDGET_MB", "1"),
        ("SANDBOXD_AUTO_PAUSE_INTERVAL_MS", "200"),
    ];
    let server = fixture.serve(MASTER, &env);
    let body = serde_json::json!({
        "template": "default",
        "autoPause": true,
        "egress": {"deny": [fake.addr(3)]},
    });
    let created = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
    assert_eq!(created.status / 100, 2, "{}", created.text());
    let id = created.json()["id"].as_str().expect("id").to_owned();
    let addr = fakenet::leased_address(&id).expect("a lease");
    let exec = format!("/v1/sandboxes/{id}/exec");
    let run = |cmd: &str| -> String {
        let body = serde_json::json!({ "cmd": cmd });
        let r = server.request("POST", &exec, MASTER, Some(&body));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["exitCode"], 0, "{}", r.text());
        r.json()["stdout"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let start = format!(
        "cat > /root/counter.py <<'EOF'\n{COUNTER}EOF\n\
         setsid python3 /root/counter.py </dev/null >/dev/null 2>&1 &\n\
         while [ ! -s /root/count ]; do sleep 0.1; done"
    );
    run(&start);
    let path = format!("/v1/sandboxes/{id}");
    common::wait_for("the sandbox recorded on disk", || {
        server.request("GET", &path, MASTER, None).json()["autoPausedAt"].is_string()
    });
    assert!(
        image(&data, id.parse().expect("uuid")).is_file(),
        "no memory image"
    );
    assert!(
        sandbox_processes_under(&data).is_empty(),
        "a sentry on disk"
    );
    assert_eq!(fakenet::leased_address(&id).as_deref(), Some(addr.as_str()));
    assert!(fakenet::link_exists(&id) && fakenet::nft_entries_exist(&id));
    let on_disk: u64 =
        std::fs::read_to_string(data.join(format!("sandboxes/{id}/layer/upper/root/count")))
            .expect("count")
            .trim()
            .parse()
            .expect("number");

    // One exec wakes it and probes: the counter went on, same address, same policy.
    let probe = |host: &str| {
        format!(
            "python3 -c '{}' {host} 8080",
            fakenet::LOCAL_PROBE.replace('\'', "\"")
        )
    };
    let out = run(&format!(
        "cat /root/count; echo; {}; {}",
        probe(&fake.addr(2)),
        probe(&fake.addr(3))
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let woke: u64 = lines[0].parse().expect("number");
    assert!(
        woke >= on_disk,
        "the counter restarted: {on_disk} -> {woke}"
    );
    assert_eq!(lines[1], format!("ok {addr} hello"));
    assert!(
        lines[2].starts_with("err"),
        "the denied host is reachable: {out}"
    );

    let del = server.request("DELETE", &path, MASTER, None);
    assert_eq!(del.status / 100, 2, "{}", del.text());
    common::wait_for("the sandbox gone", || {
        sandbox_processes_under(&data).is_empty() && sandbox_dir_names(&data).is_empty()
    });
    assert_eq!(fakenet::leased_address(&id), None, "lease left behind");
    assert!(!fakenet::link_exists(&id), "veth left behind");
    assert!(!fakenet::nft_entries_exist(&id), "nft entries left behind");
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}
