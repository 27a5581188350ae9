//! An in-process engine over the real Linux backend for the fault injection tests, and
//! the check that nothing of a sandbox outlives a failed or ended operation: directory,
//! mount, loop device, cgroup, id slot, network lease, process or transitional record.

#![allow(dead_code)]

#[path = "../own_cgroups/mod.rs"]
mod own_cgroups;

use sandboxd_engine::{
    CreateSandbox, Deadlines, DiskPolicy, Engine, EngineConfig, Limits, NetworkMode, PageRequest,
    Resources, Sandbox, SandboxStatus,
};
use sandboxd_runtime::linux::{LinuxConfig, LinuxRuntime, NetConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

pub const WS: &str = "faults";

/// Statuses no record may be left in once its operation returned.
pub const TRANSITIONAL: [SandboxStatus; 5] = [
    SandboxStatus::Pending,
    SandboxStatus::Starting,
    SandboxStatus::Pausing,
    SandboxStatus::Resuming,
    SandboxStatus::Terminating,
];

/// An engine over a fresh data dir; removes what is left and the data dir when dropped.
pub struct Fixture {
    pub data: PathBuf,
    pub rt: Arc<LinuxRuntime>,
    pub engine: Arc<Engine>,
    _dir: tempfile::TempDir,
    /// The egress network state (leases, lock), the fixture's own.
    net_state: Option<tempfile::TempDir>,
}

impl Fixture {
    /// With the given deadlines, and egress networking for every sandbox if `egress`,
    /// with network state of its own: the caller's thread must be in a network
    /// namespace of its own (the runtime's threads are started from it), so that no
    /// other test's parked network or spare is taken (those skip `network.prepare`)
    /// and the shared table is this fixture's alone.
    pub fn new(deadlines: Deadlines, egress: bool) -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().canonicalize().expect("canonical data dir");
        let mut rt = LinuxRuntime::new(LinuxConfig {
            data_dir: data.clone(),
            init_exe: env!("CARGO_BIN_EXE_sandboxd").into(),
            init_args: vec!["__sandbox-init".into()],
            cgroup_parent: own_cgroups::parent_for(&data),
            max_ptys_per_sandbox: sandboxd_runtime::linux::DEFAULT_MAX_PTYS,
        })
        .expect("linux runtime");
        let net_state = egress.then(|| tempfile::tempdir().expect("temp dir"));
        if let Some(state) = &net_state {
            rt = rt.with_network(NetConfig {
                state_dir: state.path().to_path_buf(),
                ..NetConfig::from_host()
            });
        }
        let rt = Arc::new(rt);
        let store = sandboxd_store::SqliteStore::open(data.join("sandboxd.db")).expect("store");
        let engine = Engine::open(EngineConfig {
            data_dir: data.clone(),
            runtime: rt.clone(),
            store: Arc::new(store),
            limits: Limits {
                // A shared host's free space must not refuse creates (full_disk.rs tests
                // admission).
                disk_policy: DiskPolicy {
                    overcommit_percent: 100_000,
                    reserve_mb: 64,
                },
                default_network: match egress {
                    true => NetworkMode::Egress,
                    false => NetworkMode::None,
                },
                deadlines,
                ..Limits::default()
            },
        })
        .expect("engine");
        Fixture {
            data,
            rt,
            engine,
            _dir: dir,
            net_state,
        }
    }

    pub fn ws(&self) -> String {
        WS.to_owned()
    }

    /// Every record of the workspace.
    pub async fn records(&self) -> Vec<Sandbox> {
        let page = PageRequest {
            limit: 100,
            cursor: None,
        };
        self.engine
            .list(&self.ws(), page)
            .await
            .expect("list")
            .items
    }

    /// Asserts nothing is left on the host but what the sandboxes `live` hold, and no
    /// record is transitional.
    pub async fn assert_only(&self, live: &[Uuid], what: &str) {
        let live: Vec<String> = live.iter().map(Uuid::to_string).collect();
        let extra = |found: Vec<String>| -> Vec<String> {
            found
                .into_iter()
                .filter(|f| !live.iter().any(|id| f.contains(id.as_str())))
                .collect()
        };
        assert_eq!(
            extra(entries(&self.data.join("sandboxes"))),
            Vec::<String>::new(),
            "{what}: sandbox dirs left"
        );
        assert_eq!(
            extra(mounts_under(&self.data)),
            Vec::<String>::new(),
            "{what}: mounts left"
        );
        assert_eq!(
            extra(loops_under(&self.data)),
            Vec::<String>::new(),
            "{what}: loop devices left"
        );
        assert_eq!(
            extra(slot_leases(&self.data)),
            Vec::<String>::new(),
            "{what}: id slots left"
        );
        assert_eq!(
            extra(self.cgroups()),
            Vec::<String>::new(),
            "{what}: cgroups left"
        );
        for sb in self.records().await {
            assert!(
                !TRANSITIONAL.contains(&sb.status),
                "{what}: {} left {}",
                sb.id,
                sb.status.as_str()
            );
            if live.contains(&sb.id.to_string()) {
                continue;
            }
            let id = sb.id.to_string();
            assert_eq!(
                processes_of(&id),
                Vec::<i32>::new(),
                "{what}: processes of {id} left"
            );
            let net_state = self
                .net_state
                .as_ref()
                .map_or(Path::new("/run/sandboxd/net"), |d| d.path());
            assert!(
                !net_state.join("leases").join(&id).exists(),
                "{what}: network lease of {id} left"
            );
            assert!(!link_exists(&id), "{what}: veth of {id} left");
        }
    }

    /// Names of the sandbox cgroups under the tests' parent, in every hierarchy.
    fn cgroups(&self) -> Vec<String> {
        self.rt
            .cgroups()
            .dirs(Uuid::nil())
            .iter()
            .filter_map(|d| d.parent())
            .flat_map(entries_dirs)
            .collect()
    }

    /// Ends every live sandbox, then checks nothing is left.
    pub async fn finish(self) {
        for sb in self.records().await {
            if sb.status.is_active() {
                self.engine
                    .destroy(&self.ws(), sb.id)
                    .await
                    .expect("destroy");
            }
        }
        self.assert_only(&[], "at the end").await;
        self.rt.drain_warm_inits();
        self.rt.cgroups().remove_parent_if_unused();
    }
}

/// A small create request named `name`.
pub fn request(name: &str) -> CreateSandbox {
    CreateSandbox {
        name: Some(name.into()),
        resources: Resources {
            vcpu: 1,
            memory_mb: 128,
        },
        image: None,
        snapshot_id: None,
        environment: BTreeMap::new(),
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

/// Polls (every 50 ms, up to a minute) until `probe` gives `Some`.
pub async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn entries_dirs(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let prefix = dir.display().to_string();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&prefix))
        .map(String::from)
        .collect()
}

fn loops_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    std::fs::read_dir("/sys/block")
        .expect("/sys/block")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("loop/backing_file")).ok())
        .filter(|f| f.starts_with(&prefix))
        .map(|f| f.trim().to_owned())
        .collect()
}

/// Ids holding a host id slot leased for `data`.
pub fn slot_leases(data: &Path) -> Vec<String> {
    sandboxd_runtime::linux::host_slot_leases()
        .into_iter()
        .filter(|(dir, _)| dir == data)
        .map(|(_, id)| id.to_string())
        .collect()
}

/// Host PIDs whose cgroup names `id`.
fn processes_of(id: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|cgroup| cgroup.contains(id))
        })
        .collect()
}

/// Whether the sandbox's veth (`sbx` + the first 12 hex digits of its id) exists.
fn link_exists(id: &str) -> bool {
    let simple: String = id.chars().filter(|c| *c != '-').take(12).collect();
    Path::new("/sys/class/net")
        .join(format!("sbx{simple}"))
        .exists()
}
