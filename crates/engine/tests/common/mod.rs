//! A recording test double of the `Runtime` seam and one helper to open an engine on it.

#![allow(dead_code)]

use sandboxd_engine::*;
use sandboxd_runtime::*;
use sandboxd_store::SqliteStore;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// What the double knows: live sandboxes, frozen ones, layers, and every spec started.
#[derive(Default)]
pub struct FakeState {
    pub alive: HashSet<Uuid>,
    pub frozen: HashSet<Uuid>,
    pub destroyed: Vec<Uuid>,
    pub specs: HashMap<Uuid, SandboxSpec>,
    pub networks: HashMap<Uuid, NetworkMode>,
    pub layers: HashSet<String>,
    pub deleted_layers: Vec<String>,
    pub fail_start: bool,
    /// Takes memory snapshots (as gVisor does; as a container backend, none, when off).
    pub memory: bool,
}

/// A `Runtime` that keeps sandboxes as entries in memory; its agent sockets lead nowhere.
pub struct FakeRuntime {
    pub state: Mutex<FakeState>,
    pub socket_dir: PathBuf,
}

impl FakeRuntime {
    pub fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap()
    }

    /// Simulates the agent dying (e.g. OOM-killed).
    pub fn kill(&self, id: Uuid) {
        self.state().alive.remove(&id);
    }
}

impl Runtime for FakeRuntime {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn start(&self, spec: &SandboxSpec) -> Result<SandboxHandle, RuntimeError> {
        let mut st = self.state();
        if st.fail_start {
            return Err(RuntimeError::AgentStart(
                "agent exited with status 1".into(),
            ));
        }
        st.alive.insert(spec.id);
        st.specs.insert(spec.id, spec.clone());
        Ok(SandboxHandle {
            id: spec.id,
            agent_pid: 1_000_000,
            agent_start_ticks: 1,
            agent_socket: self.socket_dir.join(format!("{}.sock", spec.id)),
            state_dir: self.socket_dir.join(spec.id.to_string()),
            host_id_base: 65536 * 3,
            warm: false,
            isolation: Default::default(),
        })
    }
    /// Any network: its mode is recorded; no link is made.
    fn start_with_network(
        &self,
        spec: &SandboxSpec,
        network: &NetworkSpec,
    ) -> Result<SandboxHandle, RuntimeError> {
        let handle = self.start(spec)?;
        self.state().networks.insert(spec.id, network.mode);
        Ok(handle)
    }
    fn offers(&self, isolation: Isolation) -> Result<(), RuntimeError> {
        match (isolation, self.state().memory) {
            (Isolation::Gvisor, false) => Err(RuntimeError::Unsupported("no gvisor".into())),
            _ => Ok(()),
        }
    }
    fn can_snapshot_memory(&self, _: &SandboxHandle) -> bool {
        self.state().memory
    }
    /// Its "image" a path no file is at.
    fn snapshot_memory(
        &self,
        handle: &SandboxHandle,
        id: Uuid,
    ) -> (Result<MemorySnapshot, RuntimeError>, SandboxHandle) {
        let taken = self.capture_layer(handle).map(|layer| MemorySnapshot {
            layer,
            image: self.socket_dir.join(format!("memory-{id}")),
        });
        (taken, handle.clone())
    }
    fn start_from_memory(
        &self,
        spec: &SandboxSpec,
        network: &NetworkSpec,
        _: &std::path::Path,
    ) -> Result<SandboxHandle, RuntimeError> {
        self.start_with_network(spec, network)
    }
    fn is_alive(&self, handle: &SandboxHandle) -> bool {
        self.state().alive.contains(&handle.id)
    }
    fn freeze(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        self.state().frozen.insert(handle.id);
        Ok(())
    }
    fn thaw(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        self.state().frozen.remove(&handle.id);
        Ok(())
    }
    fn capture_layer(&self, handle: &SandboxHandle) -> Result<Layer, RuntimeError> {
        let digest = format!(
            "{:0>64}",
            handle.id.simple().to_string() + &Uuid::new_v4().simple().to_string()
        );
        self.state().layers.insert(digest.clone());
        Ok(Layer {
            digest,
            size_bytes: 4096,
        })
    }
    fn destroy(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        let mut st = self.state();
        st.alive.remove(&handle.id);
        st.frozen.remove(&handle.id);
        st.destroyed.push(handle.id);
        Ok(())
    }
    fn usage(&self, _: &SandboxHandle) -> Result<ResourceUsage, RuntimeError> {
        Ok(ResourceUsage::default())
    }
    fn resolve_image(&self, name: &str) -> Result<ImageLayers, RuntimeError> {
        match name {
            "default" | "python" => Ok(ImageLayers {
                name: name.into(),
                layers: vec!["base".into()],
                ..Default::default()
            }),
            other => Err(RuntimeError::UnknownImage(other.into())),
        }
    }
    fn delete_layer(&self, digest: &str) -> Result<(), RuntimeError> {
        let mut st = self.state();
        st.layers.remove(digest);
        st.deleted_layers.push(digest.into());
        Ok(())
    }
}

/// An engine over a fresh SQLite store and a fake runtime, all inside `dir`.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub engine: Arc<Engine>,
    pub runtime: Arc<FakeRuntime>,
    pub store: Arc<SqliteStore>,
}

pub const WS: &str = "w1";

pub fn limits() -> Limits {
    Limits {
        max_sandboxes: 10,
        max_vcpu_total: 16,
        max_memory_mb_total: 8192,
        pids_per_sandbox: 512,
        disk_policy: generous_disk(),
        ..Limits::default()
    }
}

/// Disk admission that a shared test host's free space never trips (the admission
/// itself is tested on a filesystem of its own in `sandboxd/tests/full_disk.rs`).
pub fn generous_disk() -> DiskPolicy {
    DiskPolicy {
        overcommit_percent: 100_000,
        reserve_mb: 64,
    }
}

impl Harness {
    pub fn new() -> Self {
        Self::with_limits(limits())
    }

    pub fn with_limits(limits: Limits) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path().join("sandboxd.db")).unwrap());
        let runtime = Arc::new(FakeRuntime {
            state: Mutex::default(),
            socket_dir: dir.path().join("sockets"),
        });
        let engine = open(&dir, &runtime, &store, limits);
        Harness {
            dir,
            engine,
            runtime,
            store,
        }
    }

    /// A second engine over the same store and runtime (a server restart).
    pub fn reopen(&self) -> Arc<Engine> {
        open(&self.dir, &self.runtime, &self.store, limits())
    }

    pub fn ws(&self) -> WorkspaceId {
        WS.to_string()
    }
}

fn open(
    dir: &tempfile::TempDir,
    runtime: &Arc<FakeRuntime>,
    store: &Arc<SqliteStore>,
    limits: Limits,
) -> Arc<Engine> {
    Engine::open(EngineConfig {
        data_dir: dir.path().join("data"),
        runtime: runtime.clone(),
        store: store.clone(),
        limits,
    })
    .unwrap()
}

pub fn request(name: Option<&str>) -> CreateSandbox {
    CreateSandbox {
        name: name.map(Into::into),
        resources: Resources {
            vcpu: 1,
            memory_mb: 256,
        },
        image: None,
        snapshot_id: None,
        environment: BTreeMap::from([("GREETING".into(), "hello".into())]),
        secrets: Vec::new(),
        metadata: BTreeMap::new(),
        timeout: None,
        auto_pause: false,
        network: None,
        egress: None,
        disk_mb: None,
        aliases: Default::default(),
        attributes: Default::default(),
        isolation: None,
    }
}

pub fn exec(argv: &[&str]) -> ExecCommand {
    ExecCommand {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: None,
        cwd: None,
        timeout: std::time::Duration::from_secs(5),
        max_output_bytes: 1 << 20,
    }
}
