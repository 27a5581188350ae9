//! The `Engine` value: configuration, opening (with re-adoption), and the shared helpers
//! every operation uses to load, lock and persist a sandbox.

use crate::convert::{self, Entry};
use crate::error::{EngineError, ErrorCode};
use crate::locks::Locks;
use crate::model::WorkspaceId;
use sandboxd_runtime::{Runtime, RuntimeError};
use sandboxd_store::{Store, StoreError};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard};
use uuid::Uuid;

/// Server-wide capacity limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Active sandboxes at once.
    pub max_sandboxes: u32,
    /// Sum of vCPUs of active sandboxes.
    pub max_vcpu_total: u32,
    /// Sum of memory of active sandboxes.
    pub max_memory_mb_total: u64,
    /// Task limit given to each sandbox.
    pub pids_per_sandbox: u32,
    /// Default size of a sandbox's writable layer in MiB (0: unlimited), for creates
    /// whose request and source snapshot name none.
    pub disk_mb_per_sandbox: u32,
    /// Largest writable layer a create may ask for or inherit, in MiB; 0: no maximum
    /// (an unlimited layer may then be asked for too).
    pub max_disk_mb_per_sandbox: u32,
    /// How much of the data dir's room the writable layers may promise.
    pub disk_policy: crate::disk_admission::DiskPolicy,
    /// What each workspace may hold at once.
    pub workspace_quota: crate::quota::Quota,
    /// Creates per workspace: a token bucket.
    pub create_rate: crate::quota::CreateRate,
    /// Network of sandboxes whose request and template name none. `None` (only
    /// loopback) by default: egress needs a backend configured for it.
    pub default_network: sandboxd_runtime::NetworkMode,
    /// How long each transitional state may last.
    pub deadlines: crate::lifecycle::deadline::Deadlines,
    /// Whether pause writes a sandbox's memory to disk (and frees it) on backends that
    /// can (gVisor); otherwise, and on the container tier, pause freezes in memory.
    pub pause_to_disk: bool,
    /// When consenting sandboxes are moved to disk for memory (autoPause).
    pub auto_pause: crate::auto_pause::AutoPause,
    /// The tier of sandboxes whose request, template and workspace choose none (and of
    /// those recorded before tiers were).
    pub isolation: sandboxd_runtime::Isolation,
    /// Long-lived requests (execs, waits, streams, followed logs, terminals) one
    /// workspace may have in flight at once; 0: no cap.
    pub max_in_flight_per_workspace: u32,
    /// Bytes of captured exec output the server holds at once, all workspaces together
    /// (each exec reserves [`crate::BYTES_PER_OUTPUT_BYTE`] × its output cap); 0: no
    /// budget.
    pub exec_output_budget_bytes: u64,
    /// How long the agent may leave a call and a health check unanswered before the
    /// call fails as `Unavailable` (see `ops::answer`).
    pub agent_answer: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sandboxes: 100,
            max_vcpu_total: 64,
            max_memory_mb_total: 64 * 1024,
            pids_per_sandbox: 1024,
            disk_mb_per_sandbox: 10 * 1024,
            max_disk_mb_per_sandbox: 10 * 1024,
            disk_policy: Default::default(),
            workspace_quota: Default::default(),
            create_rate: Default::default(),
            default_network: sandboxd_runtime::NetworkMode::None,
            deadlines: Default::default(),
            pause_to_disk: true,
            auto_pause: Default::default(),
            isolation: Default::default(),
            max_in_flight_per_workspace: 512,
            exec_output_budget_bytes: 512 << 20,
            agent_answer: crate::ops::DEFAULT_AGENT_ANSWER,
        }
    }
}

/// What the engine is built from.
pub struct EngineConfig {
    pub data_dir: PathBuf,
    pub runtime: Arc<dyn Runtime>,
    pub store: Arc<dyn Store>,
    pub limits: Limits,
}

/// The engine: owns sandbox lifecycle state, persists it, and drives the runtime.
pub struct Engine {
    pub(crate) data_dir: PathBuf,
    pub(crate) runtime: Arc<dyn Runtime>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) limits: Limits,
    pub(crate) locks: Locks,
    /// Serializes the name, capacity and insert steps of `create`.
    pub(crate) admission: tokio::sync::Mutex<()>,
    /// Streamed commands running per sandbox.
    pub(crate) sessions: crate::sessions::Sessions,
    /// Create rate buckets per workspace.
    pub(crate) create_rate: crate::quota::RateLimiter,
    /// This engine, for the tasks it starts (agent watches).
    pub(crate) me: std::sync::Weak<Engine>,
    /// Cancelled when the server begins to shut down: open streams end then.
    pub(crate) shutdown: tokio_util::sync::CancellationToken,
    /// Prometheus metrics of this engine and of the server in front of it.
    pub(crate) metrics: crate::metrics::Metrics,
    /// The last CPU reading of each sandbox whose usage was read lately.
    pub(crate) cpu_readings: crate::usage::CpuReadings,
    /// Each sandbox's last use and operations under way (autoPause picks by it).
    pub(crate) activity: crate::auto_pause::Activity,
    /// Creates restoring from each memory snapshot now (its delete waits for them).
    pub(crate) memory_pins: Arc<crate::memory_images::Pins>,
    /// Room held on the data dir for snapshots being written.
    pub(crate) disk_reservations: crate::disk_reservations::DiskReservations,
    /// The last measure of the database's room (see `db_room`).
    pub(crate) db_room: crate::db_room::DbRoom,
    /// The data dir's room, measured once for the creates that ask together.
    pub(crate) disk_measure:
        crate::shared_measure::SharedMeasure<Option<sandboxd_runtime::DiskSpace>>,
    /// Long-lived requests in flight per workspace, each ended when its key is revoked.
    pub(crate) in_flight: crate::in_flight::InFlight,
    /// Room for captured exec output, server-wide.
    pub(crate) output_budget: crate::output_budget::OutputBudget,
    /// Sandboxes held frozen by filesystem snapshots.
    pub(crate) capture_freezes: crate::capture_freeze::CaptureFreezes,
}

/// How soon a request refused for a busy database may be retried.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Busy => EngineError::with_source(
                ErrorCode::Unavailable,
                "the sandbox database is busy; retry shortly",
                e,
            )
            .retry_after(BUSY_RETRY),
            StoreError::Full => EngineError::with_source(
                ErrorCode::InsufficientStorage,
                "the data directory's disk is full",
                e,
            ),
            StoreError::Conflict(what) => {
                EngineError::new(ErrorCode::NameTaken, format!("{what} is already used"))
            }
            e => EngineError::with_source(ErrorCode::Internal, "the sandbox database failed", e),
        }
    }
}

/// Maps a backend failure to the engine's codes.
pub(crate) fn runtime_error(what: &str, e: RuntimeError) -> EngineError {
    let code = match e {
        RuntimeError::UnknownImage(_) => ErrorCode::ImageNotFound,
        RuntimeError::IdRangesExhausted => ErrorCode::CapacityExhausted,
        RuntimeError::UnknownLayer(_) => ErrorCode::SnapshotNotFound,
        RuntimeError::CannotCheckpoint(_) => ErrorCode::WrongState,
        _ => ErrorCode::Unavailable,
    };
    EngineError::with_source(code, format!("{what}: {e}"), e)
}

impl Engine {
    /// Opens the engine, re-adopts the sandboxes the store says are active, and starts
    /// the expiry task. Must be called inside a Tokio runtime.
    pub fn open(config: EngineConfig) -> Result<Arc<Engine>, EngineError> {
        let engine = Self::open_beside(config)?;
        engine.readopt()?;
        engine.sweep_memory_images();
        let tokio = tokio::runtime::Handle::current();
        tokio.spawn(crate::lifecycle::expiry::run(Arc::downgrade(&engine)));
        let every = engine.limits.auto_pause.interval;
        if !every.is_zero() {
            tokio.spawn(crate::auto_pause::run(Arc::downgrade(&engine), every));
        }
        Ok(engine)
    }

    /// An engine for a one-shot command (`sandboxd run`) beside a server that may be
    /// running over the same store and data directory: it neither re-adopts nor
    /// reconciles nor expires sandboxes (the server owns those), so it only acts on the
    /// sandboxes it is asked about.
    pub fn open_beside(config: EngineConfig) -> Result<Arc<Engine>, EngineError> {
        tokio::runtime::Handle::try_current().map_err(|e| {
            EngineError::with_source(ErrorCode::Internal, "the engine needs a Tokio runtime", e)
        })?;
        // Root only: sandbox-made files lie below (the runtime tightens an existing one).
        make_private_dir(&config.data_dir).map_err(|e| {
            EngineError::with_source(ErrorCode::Internal, "cannot create the data directory", e)
        })?;
        let in_flight = crate::in_flight::InFlight::new(
            config.limits.max_in_flight_per_workspace,
            crate::revocations::Revocations::new(config.store.clone()),
        );
        let output_budget =
            crate::output_budget::OutputBudget::new(config.limits.exec_output_budget_bytes);
        let engine = Arc::new_cyclic(|me| Engine {
            data_dir: config.data_dir,
            runtime: config.runtime,
            store: config.store,
            limits: config.limits,
            locks: Locks::default(),
            admission: tokio::sync::Mutex::new(()),
            sessions: Default::default(),
            create_rate: Default::default(),
            me: me.clone(),
            shutdown: Default::default(),
            metrics: Default::default(),
            cpu_readings: Default::default(),
            activity: Default::default(),
            memory_pins: Default::default(),
            disk_reservations: Default::default(),
            db_room: Default::default(),
            disk_measure: Default::default(),
            in_flight,
            output_budget,
            capture_freezes: Default::default(),
        });
        Ok(engine)
    }

    /// The backend's short name (`tiers` for a server's router over both tiers; each
    /// sandbox's own tier is [`crate::Sandbox::isolation`]).
    pub fn runtime_name(&self) -> &'static str {
        self.runtime.name()
    }

    /// Directory the engine was configured with.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The quota a create in `ws` is checked against: the server's, with the
    /// workspace's override (`sandboxd quota set`) applied.
    pub fn workspace_quota(&self, ws: &str) -> Result<crate::quota::Quota, EngineError> {
        let over = self.store.get_quota_override(ws)?;
        Ok(self.limits.workspace_quota.with_override(over.as_ref()))
    }

    /// Runs a blocking runtime call off the async threads.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Runtime) -> T + Send + 'static,
    ) -> Result<T, EngineError> {
        let runtime = self.runtime.clone();
        tokio::task::spawn_blocking(move || f(runtime.as_ref()))
            .await
            .map_err(|e| {
                EngineError::with_source(ErrorCode::Internal, "a runtime call panicked", e)
            })
    }

    /// Loads a sandbox of `ws` (another workspace's is not found).
    pub(crate) fn load(&self, ws: &str, id: Uuid) -> Result<Entry, EngineError> {
        let t0 = std::time::Instant::now();
        let found = self.store.get_sandbox(id);
        self.metrics.store("get_sandbox", t0.elapsed());
        match found? {
            Some(rec) if rec.workspace == ws => {
                convert::entry_from_record(rec, self.limits.isolation)
            }
            _ => Err(not_found(id)),
        }
    }

    /// [`Engine::save`] with the audit entry of the operation it completes, in one
    /// transaction: the record and its audit entry land together or not at all.
    pub(crate) fn save_audited(
        &self,
        entry: &Entry,
        audit: &sandboxd_store::AuditRecord,
    ) -> Result<(), EngineError> {
        crate::faults::store_write("store.save")?;
        crate::faults::store_write_to(entry.sb.status)?;
        crate::faults::store_write("store.insert_audit")?;
        let t0 = std::time::Instant::now();
        let saved = self
            .store
            .update_sandbox_audited(&convert::entry_to_record(entry), audit);
        self.metrics.store("update_sandbox", t0.elapsed());
        Ok(saved?)
    }

    pub(crate) fn save(&self, entry: &Entry) -> Result<(), EngineError> {
        crate::faults::store_write("store.save")?;
        crate::faults::store_write_to(entry.sb.status)?;
        let t0 = std::time::Instant::now();
        let saved = self.store.update_sandbox(&convert::entry_to_record(entry));
        self.metrics.store("update_sandbox", t0.elapsed());
        Ok(saved?)
    }

    /// Takes the sandbox's lock shared (runtime operations), after ending it first
    /// if it expired, and loads it.
    pub(crate) async fn shared(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
    ) -> Result<(OwnedRwLockReadGuard<()>, Entry), EngineError> {
        // One load on the common path: a sandbox that is not due needs nothing first.
        let guard = self.locks.get(id).read_owned().await;
        let e = self.load(ws, id)?;
        if !crate::lifecycle::is_due(&e.sb, time::OffsetDateTime::now_utc()) {
            return Ok((guard, e));
        }
        drop(guard);
        self.expire_if_due(ws, id).await?;
        let guard = self.locks.get(id).read_owned().await;
        Ok((guard, self.load(ws, id)?))
    }

    /// Takes the sandbox's lock exclusively (lifecycle changes), after ending it first
    /// if it expired, and loads it.
    pub(crate) async fn exclusive(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
    ) -> Result<(OwnedRwLockWriteGuard<()>, Entry), EngineError> {
        let guard = self.locks.get(id).write_owned().await;
        let e = self.load(ws, id)?;
        if !crate::lifecycle::is_due(&e.sb, time::OffsetDateTime::now_utc()) {
            return Ok((guard, e));
        }
        drop(guard);
        self.expire_if_due(ws, id).await?;
        let guard = self.locks.get(id).write_owned().await;
        Ok((guard, self.load(ws, id)?))
    }
}

pub(crate) fn not_found(id: Uuid) -> EngineError {
    EngineError::new(
        ErrorCode::SandboxNotFound,
        format!("sandbox {id} not found"),
    )
}

/// Makes `dir` (its parents as usual) `0700` when it does not exist yet.
fn make_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}
