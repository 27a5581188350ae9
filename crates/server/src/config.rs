//! Server configuration in layers: defaults, then an optional TOML file (unknown fields
//! rejected), then `SANDBOXD_*` environment variables. The master key never appears in
//! `Debug` output or logs.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

mod abuse;
mod auto_pause;
mod connections;
mod disk;
pub mod host_tasks;
mod isolation;
mod layer_gc;
mod observability;
mod registries;

pub use connections::ConnectionLimits;
pub use isolation::Isolation;
pub use layer_gc::LayerGc;
pub use observability::{MetricsListen, DEFAULT_METRICS_LISTEN};

/// Most hours ended sandboxes' records may be kept (100 years; 0 is forever).
pub const MAX_ENDED_RETENTION_HOURS: u32 = 100 * 366 * 24;
/// Most days audit entries may be kept (100 years; 0 is forever).
pub const MAX_AUDIT_RETENTION_DAYS: u32 = 100 * 366;

/// Where and how the server runs.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// An API key accepted for the default workspace (created on start if missing).
    pub master_key: Option<String>,
    /// Seconds a timed-out streamed command may run after its SIGTERM before it is
    /// killed (Runzivo exec; 30 by default; tests shorten it).
    pub exec_kill_grace_seconds: u64,
    /// Server capacity: active sandboxes, their summed vCPUs and memory (MiB). A create
    /// past it waits (OpenRelay `waitSeconds`) or is refused.
    pub max_sandboxes: u32,
    pub max_vcpu_total: u32,
    pub max_memory_mib_total: u64,
    /// Default size limit of a sandbox's writable layer in MiB (0: unlimited; 10 GiB by
    /// default), for creates whose request and template name none.
    pub disk_mb_per_sandbox: u32,
    /// Largest writable layer a create or template may ask for, in MiB (10 GiB by
    /// default; 0: no maximum, unlimited layers included). Never below the default.
    pub max_disk_mb_per_sandbox: u32,
    /// Disk admission: overcommit of the data dir's room and the reserve kept from it.
    pub disk: sandboxd_engine::DiskPolicy,
    /// What one workspace may hold at once (a stored per-workspace override wins).
    pub workspace_quota: sandboxd_engine::Quota,
    /// The token bucket on creates per workspace.
    pub create_rate: sandboxd_engine::CreateRate,
    /// Network of sandboxes whose request and template name none: `egress` (default)
    /// or `none` (only loopback).
    pub network: sandboxd_engine::NetworkMode,
    /// DNS resolvers of egress sandboxes (also used to resolve domain rules); `None`:
    /// the host's upstream resolvers from `/etc/resolv.conf`.
    pub resolvers: Option<Vec<std::net::Ipv4Addr>>,
    /// Sandbox inits kept started ahead of time, so a create skips the slow host steps
    /// of a start (2 by default; 0 starts every sandbox cold).
    pub warm_inits: u32,
    /// How far the warm pool may grow while creates outrun its refill (32 by default;
    /// below `warm_inits`: no growth); it shrinks back after quiet minutes.
    pub warm_inits_max: u32,
    /// The warm pool's size from the server's start, so that a first burst of creates
    /// starts warm (20 by default, about 3 MiB of host memory each, ~2.9 MiB measured;
    /// at most `warm_inits_max`; at or below `warm_inits`: the base only). It shrinks
    /// back to `warm_inits` like a pool a burst grew, at a create after quiet minutes.
    /// The pool (all three sizes, and its entries of every shape) never exceeds
    /// `max_sandboxes` less the sandboxes running, nor, with an autoPause memory
    /// budget, an eighth of that budget at 3 MiB each.
    pub warm_inits_start: u32,
    /// Images (other than `default`) whose next create is kept warm: the last this many
    /// images that creates used each keep one warm init parked in their root (2 by
    /// default; 0: image creates take a warm init without a root and mount theirs).
    pub warm_images: u32,
    /// Bounds on the API's client connections.
    pub connections: ConnectionLimits,
    /// PTYs one sandbox may have open at once (its devpts `max=`; 64 by default; 0:
    /// only the host's `kernel.pty.max` bounds it).
    pub max_ptys_per_sandbox: u32,
    /// Tasks (processes and threads) each sandbox may hold; `None`: derived from the
    /// host's task table (see [`host_tasks`]).
    pub pids_per_sandbox: Option<u32>,
    /// Seconds SIGTERM (or SIGINT) waits for open requests and streams to finish
    /// before the server exits anyway (30 by default; a second signal exits at once).
    pub shutdown_grace_seconds: u64,
    /// Seconds a sandbox's agent may leave a call and a health check unanswered before
    /// the call fails as unavailable (30 by default; at least 1).
    pub agent_answer_seconds: u64,
    /// Registries (`host[:port]`) image pulls reach over plain HTTP although they are
    /// not on loopback (none by default).
    pub insecure_registries: Vec<String>,
    /// The tier sandboxes run on: `container` (default) or `gvisor` (needs `runsc`).
    pub isolation: Isolation,
    /// The background layer collector's schedule.
    pub layer_gc: LayerGc,
    /// Where Prometheus metrics are served (`GET /metrics`); `None`: nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Days the audit trail keeps its entries (90 by default; 0 keeps them forever).
    pub audit_retention_days: u32,
    /// Hours an ended sandbox's record is kept (168, 7 days, by default; 0 keeps them
    /// forever); then it is removed.
    pub ended_retention_hours: u32,
    /// Whether pause writes a gVisor sandbox's memory to disk (default) or freezes it
    /// in memory; container sandboxes always freeze in memory.
    pub pause_to_disk: bool,
    /// When gVisor sandboxes that consented (autoPause) are moved to disk for memory.
    pub auto_pause: sandboxd_engine::AutoPause,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7420)),
            data_dir: PathBuf::from("./.sandboxd"),
            master_key: None,
            exec_kill_grace_seconds: 30,
            max_sandboxes: sandboxd_engine::Limits::default().max_sandboxes,
            max_vcpu_total: sandboxd_engine::Limits::default().max_vcpu_total,
            max_memory_mib_total: sandboxd_engine::Limits::default().max_memory_mb_total,
            disk_mb_per_sandbox: sandboxd_engine::Limits::default().disk_mb_per_sandbox,
            max_disk_mb_per_sandbox: sandboxd_engine::Limits::default().max_disk_mb_per_sandbox,
            disk: Default::default(),
            workspace_quota: Default::default(),
            create_rate: Default::default(),
            network: sandboxd_engine::NetworkMode::Egress,
            resolvers: None,
            warm_inits: 2,
            warm_inits_max: 32,
            warm_inits_start: 20,
            warm_images: 2,
            connections: ConnectionLimits::default(),
            max_ptys_per_sandbox: 64,
            pids_per_sandbox: None,
            shutdown_grace_seconds: 30,
            agent_answer_seconds: 30,
            insecure_registries: Vec::new(),
            isolation: Isolation::Container,
            layer_gc: Default::default(),
            metrics_listen: Some(DEFAULT_METRICS_LISTEN),
            audit_retention_days: 90,
            ended_retention_hours: 168,
            pause_to_disk: true,
            auto_pause: Default::default(),
        }
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field(
                "master_key",
                &self.master_key.as_ref().map(|_| "<redacted>"),
            )
            .field("exec_kill_grace_seconds", &self.exec_kill_grace_seconds)
            .field("max_sandboxes", &self.max_sandboxes)
            .field("max_vcpu_total", &self.max_vcpu_total)
            .field("max_memory_mib_total", &self.max_memory_mib_total)
            .field("disk_mb_per_sandbox", &self.disk_mb_per_sandbox)
            .field("max_disk_mb_per_sandbox", &self.max_disk_mb_per_sandbox)
            .field("disk", &self.disk)
            .field("workspace_quota", &self.workspace_quota)
            .field("create_rate", &self.create_rate)
            .field("network", &self.network)
            .field("resolvers", &self.resolvers)
            .field("warm_inits", &self.warm_inits)
            .field("warm_inits_max", &self.warm_inits_max)
            .field("warm_inits_start", &self.warm_inits_start)
            .field("warm_images", &self.warm_images)
            .field("connections", &self.connections)
            .field("max_ptys_per_sandbox", &self.max_ptys_per_sandbox)
            .field("pids_per_sandbox", &self.pids_per_sandbox)
            .field("shutdown_grace_seconds", &self.shutdown_grace_seconds)
            .field("agent_answer_seconds", &self.agent_answer_seconds)
            .field("insecure_registries", &self.insecure_registries)
            .field("isolation", &self.isolation)
            .field("layer_gc", &self.layer_gc)
            .field("metrics_listen", &self.metrics_listen)
            .field("audit_retention_days", &self.audit_retention_days)
            .field("ended_retention_hours", &self.ended_retention_hours)
            .field("pause_to_disk", &self.pause_to_disk)
            .field("auto_pause", &self.auto_pause)
            .finish()
    }
}

/// Why the configuration could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config file {path}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("invalid value of {var}: {message}")]
    Env { var: &'static str, message: String },
    #[error("inconsistent configuration: {0}")]
    Inconsistent(String),
}

/// The file layer: every field optional, nothing else allowed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLayer {
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    master_key: Option<String>,
    exec_kill_grace_seconds: Option<u64>,
    max_sandboxes: Option<u32>,
    max_vcpu_total: Option<u32>,
    max_memory_mib_total: Option<u64>,
    disk_mb_per_sandbox: Option<u32>,
    max_disk_mb_per_sandbox: Option<u32>,
    disk_overcommit: Option<disk::Overcommit>,
    disk_reserve_mb: Option<u64>,
    workspace_quota: Option<abuse::QuotaLayer>,
    create_rate: Option<abuse::RateLayer>,
    network: Option<sandboxd_engine::NetworkMode>,
    resolvers: Option<Vec<std::net::Ipv4Addr>>,
    warm_inits: Option<u32>,
    warm_inits_max: Option<u32>,
    warm_inits_start: Option<u32>,
    warm_images: Option<u32>,
    connections: Option<connections::ConnectionsLayer>,
    max_ptys_per_sandbox: Option<u32>,
    pids_per_sandbox: Option<u32>,
    shutdown_grace_seconds: Option<u64>,
    agent_answer_seconds: Option<u64>,
    insecure_registries: Option<Vec<String>>,
    isolation: Option<Isolation>,
    layer_gc: Option<layer_gc::LayerGcLayer>,
    metrics_listen: Option<MetricsListen>,
    audit_retention_days: Option<u32>,
    ended_retention_hours: Option<u32>,
    pause_to_disk: Option<bool>,
    auto_pause: Option<auto_pause::AutoPauseLayer>,
}

impl ServerConfig {
    /// Defaults, overlaid by `file` (if given) and then by the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_with(file, |name| std::env::var(name).ok())
    }

    /// [`ServerConfig::load`] with the environment supplied by `env`.
    pub fn load_with(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        if let Some(path) = file {
            let read = |source| ConfigError::Read {
                path: path.to_owned(),
                source,
            };
            let mut opened = std::fs::File::open(path).map_err(read)?;
            let meta = opened.metadata().map_err(read)?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut opened, &mut text).map_err(read)?;
            let layer: FileLayer = toml::from_str(&text).map_err(|source| ConfigError::Parse {
                path: path.to_owned(),
                source,
            })?;
            if layer
                .master_key
                .as_deref()
                .is_some_and(|k| !k.trim().is_empty())
            {
                key_file_private(path, &meta)?;
            }
            config.apply(layer);
        }
        let listen = match env("SANDBOXD_LISTEN") {
            Some(raw) => {
                Some(
                    raw.parse()
                        .map_err(|e: std::net::AddrParseError| ConfigError::Env {
                            var: "SANDBOXD_LISTEN",
                            message: e.to_string(),
                        })?,
                )
            }
            None => None,
        };
        let grace = match env("SANDBOXD_EXEC_KILL_GRACE_SECONDS") {
            Some(raw) => {
                Some(
                    raw.parse()
                        .map_err(|e: std::num::ParseIntError| ConfigError::Env {
                            var: "SANDBOXD_EXEC_KILL_GRACE_SECONDS",
                            message: e.to_string(),
                        })?,
                )
            }
            None => None,
        };
        let (disk_overcommit, disk_reserve_mb) = disk::from_env(&env)?;
        config.apply(FileLayer {
            listen,
            data_dir: env("SANDBOXD_DATA_DIR").map(PathBuf::from),
            master_key: env("SANDBOXD_MASTER_KEY"),
            exec_kill_grace_seconds: grace,
            max_sandboxes: env_number(&env, "SANDBOXD_MAX_SANDBOXES")?,
            max_vcpu_total: env_number(&env, "SANDBOXD_MAX_VCPU_TOTAL")?,
            max_memory_mib_total: env_number(&env, "SANDBOXD_MAX_MEMORY_MIB_TOTAL")?,
            disk_mb_per_sandbox: env_number(&env, "SANDBOXD_DISK_MB_PER_SANDBOX")?,
            max_disk_mb_per_sandbox: env_number(&env, "SANDBOXD_MAX_DISK_MB_PER_SANDBOX")?,
            disk_overcommit,
            disk_reserve_mb,
            workspace_quota: abuse::QuotaLayer::from_env(&env)?,
            create_rate: abuse::RateLayer::from_env(&env)?,
            network: env_network(&env)?,
            resolvers: env_resolvers(&env)?,
            warm_inits: env_number(&env, "SANDBOXD_WARM_INITS")?,
            warm_inits_max: env_number(&env, "SANDBOXD_WARM_INITS_MAX")?,
            warm_inits_start: env_number(&env, "SANDBOXD_WARM_INITS_START")?,
            warm_images: env_number(&env, "SANDBOXD_WARM_IMAGES")?,
            connections: connections::ConnectionsLayer::from_env(&env)?,
            max_ptys_per_sandbox: env_number(&env, "SANDBOXD_MAX_PTYS_PER_SANDBOX")?,
            pids_per_sandbox: env_number(&env, "SANDBOXD_PIDS_PER_SANDBOX")?,
            shutdown_grace_seconds: env_number(&env, "SANDBOXD_SHUTDOWN_GRACE_SECONDS")?,
            agent_answer_seconds: env_number(&env, "SANDBOXD_AGENT_ANSWER_SECONDS")?,
            insecure_registries: registries::from_env(&env)?,
            isolation: isolation::from_env(&env)?,
            layer_gc: layer_gc::LayerGcLayer::from_env(&env)?,
            metrics_listen: observability::from_env(&env)?,
            audit_retention_days: observability::retention_from_env(&env)?,
            ended_retention_hours: env_number(&env, "SANDBOXD_ENDED_RETENTION_HOURS")?,
            pause_to_disk: isolation::pause_to_disk_from_env(&env)?,
            auto_pause: auto_pause::AutoPauseLayer::from_env(&env)?,
        });
        registries::check(&config.insecure_registries).map_err(ConfigError::Inconsistent)?;
        config.check_disk()?;
        config.check_ended_retention()?;
        if let Some(why) = config.pids_per_sandbox.and_then(host_tasks::refused) {
            return Err(ConfigError::Inconsistent(format!(
                "{why} (SANDBOXD_PIDS_PER_SANDBOX; unset: derived from the host)"
            )));
        }
        Ok(config)
    }

    /// The default disk must be one a create could ask for: 0 (no limit) or at least
    /// the minimum (a smaller one's snapshots could never be restored), within the
    /// maximum, and limited when a maximum is set.
    fn check_disk(&self) -> Result<(), ConfigError> {
        let (default, max) = (self.disk_mb_per_sandbox, self.max_disk_mb_per_sandbox);
        let min = sandboxd_engine::disk::MIN_DISK_MB;
        for (name, var, size) in [
            (
                "disk_mb_per_sandbox",
                "SANDBOXD_DISK_MB_PER_SANDBOX",
                default,
            ),
            (
                "max_disk_mb_per_sandbox",
                "SANDBOXD_MAX_DISK_MB_PER_SANDBOX",
                max,
            ),
        ] {
            if (1..min).contains(&size) {
                return Err(ConfigError::Inconsistent(format!(
                    "{name} {size} (MiB; {var}) is below the minimum of {min} MiB per sandbox \
                     (0 is no limit)"
                )));
            }
        }
        if max == 0 || (default != 0 && default <= max) {
            return Ok(());
        }
        let default = match default {
            0 => "0 (no limit)".to_owned(),
            n => n.to_string(),
        };
        Err(ConfigError::Inconsistent(format!(
            "disk_mb_per_sandbox {default} is past max_disk_mb_per_sandbox {max} \
             (SANDBOXD_DISK_MB_PER_SANDBOX, SANDBOXD_MAX_DISK_MB_PER_SANDBOX; a maximum \
             of 0 allows any size)"
        )))
    }

    /// Ended records are listed as history for 24 hours (OpenRelay's `state=exited`):
    /// the retention is 0 (forever) or at least that, and at most
    /// [`MAX_ENDED_RETENTION_HOURS`]; the audit trail's at most [`MAX_AUDIT_RETENTION_DAYS`]
    /// (a date that far back is no date the server can compute).
    fn check_ended_retention(&self) -> Result<(), ConfigError> {
        match self.ended_retention_hours {
            0 | 24..=MAX_ENDED_RETENTION_HOURS => Ok(()),
            n @ 1..24 => Err(ConfigError::Inconsistent(format!(
                "ended_retention_hours {n} is below the 24 hours of history the APIs \
                 list (SANDBOXD_ENDED_RETENTION_HOURS; 0 keeps records forever)"
            ))),
            n => Err(ConfigError::Inconsistent(format!(
                "ended_retention_hours {n} is past the most allowed, \
                 {MAX_ENDED_RETENTION_HOURS} (100 years; SANDBOXD_ENDED_RETENTION_HOURS; \
                 0 keeps records forever)"
            ))),
        }?;
        match self.audit_retention_days {
            0..=MAX_AUDIT_RETENTION_DAYS => Ok(()),
            n => Err(ConfigError::Inconsistent(format!(
                "audit_retention_days {n} is past the most allowed, \
                 {MAX_AUDIT_RETENTION_DAYS} (100 years; SANDBOXD_AUDIT_RETENTION_DAYS; \
                 0 keeps entries forever)"
            ))),
        }
    }

    fn apply(&mut self, layer: FileLayer) {
        if let Some(listen) = layer.listen {
            self.listen = listen;
        }
        if let Some(dir) = layer.data_dir {
            self.data_dir = dir;
        }
        if let Some(key) = layer.master_key.filter(|k| !k.trim().is_empty()) {
            self.master_key = Some(key);
        }
        if let Some(grace) = layer.exec_kill_grace_seconds {
            self.exec_kill_grace_seconds = grace;
        }
        if let Some(n) = layer.max_sandboxes {
            self.max_sandboxes = n;
        }
        if let Some(n) = layer.max_vcpu_total {
            self.max_vcpu_total = n;
        }
        if let Some(n) = layer.max_memory_mib_total {
            self.max_memory_mib_total = n;
        }
        if let Some(n) = layer.disk_mb_per_sandbox {
            self.disk_mb_per_sandbox = n;
        }
        if let Some(n) = layer.max_disk_mb_per_sandbox {
            self.max_disk_mb_per_sandbox = n;
        }
        disk::apply(layer.disk_overcommit, layer.disk_reserve_mb, &mut self.disk);
        if let Some(quota) = layer.workspace_quota {
            quota.apply(&mut self.workspace_quota);
        }
        if let Some(rate) = layer.create_rate {
            rate.apply(&mut self.create_rate);
        }
        if let Some(isolation) = layer.isolation {
            self.isolation = isolation;
        }
        if let Some(to_disk) = layer.pause_to_disk {
            self.pause_to_disk = to_disk;
        }
        if let Some(auto) = layer.auto_pause {
            auto.apply(&mut self.auto_pause);
        }
        if let Some(mode) = layer.network {
            self.network = mode;
        }
        if let Some(resolvers) = layer.resolvers {
            self.resolvers = Some(resolvers);
        }
        if let Some(n) = layer.warm_inits {
            self.warm_inits = n;
        }
        if let Some(n) = layer.warm_inits_max {
            self.warm_inits_max = n;
        }
        if let Some(n) = layer.warm_inits_start {
            self.warm_inits_start = n;
        }
        if let Some(n) = layer.warm_images {
            self.warm_images = n;
        }
        if let Some(limits) = layer.connections {
            limits.apply(&mut self.connections);
        }
        if let Some(n) = layer.max_ptys_per_sandbox {
            self.max_ptys_per_sandbox = n;
        }
        if let Some(n) = layer.pids_per_sandbox {
            self.pids_per_sandbox = Some(n);
        }
        if let Some(n) = layer.shutdown_grace_seconds {
            self.shutdown_grace_seconds = n;
        }
        if let Some(n) = layer.agent_answer_seconds {
            self.agent_answer_seconds = n.max(1);
        }
        if let Some(list) = layer.insecure_registries {
            self.insecure_registries = list;
        }
        if let Some(gc) = layer.layer_gc {
            gc.apply(&mut self.layer_gc);
        }
        if let Some(MetricsListen(addr)) = layer.metrics_listen {
            self.metrics_listen = addr;
        }
        if let Some(days) = layer.audit_retention_days {
            self.audit_retention_days = days;
        }
        if let Some(hours) = layer.ended_retention_hours {
            self.ended_retention_hours = hours;
        }
    }

    /// Each sandbox's task limit: the configured one, else derived from the host.
    pub fn pids_per_sandbox(&self) -> u32 {
        self.pids_per_sandbox
            .unwrap_or_else(|| host_tasks::derived(self.max_sandboxes, host_tasks::host_tasks()))
    }

    /// The engine's capacity limits this configuration asks for.
    pub fn limits(&self) -> sandboxd_engine::Limits {
        sandboxd_engine::Limits {
            max_sandboxes: self.max_sandboxes,
            max_vcpu_total: self.max_vcpu_total,
            max_memory_mb_total: self.max_memory_mib_total,
            workspace_quota: self.workspace_quota,
            create_rate: self.create_rate,
            default_network: self.network,
            disk_mb_per_sandbox: self.disk_mb_per_sandbox,
            max_disk_mb_per_sandbox: self.max_disk_mb_per_sandbox,
            disk_policy: self.disk,
            pause_to_disk: self.pause_to_disk,
            auto_pause: self.auto_pause,
            isolation: self.isolation,
            max_in_flight_per_workspace: self.connections.in_flight_per_workspace(),
            exec_output_budget_bytes: self.connections.exec_output_budget_mib << 20,
            agent_answer: std::time::Duration::from_secs(self.agent_answer_seconds),
            pids_per_sandbox: self.pids_per_sandbox(),
            ..Default::default()
        }
    }
}

/// A config file holding `master_key` (the key that opens every workspace) must be
/// this user's and closed to everyone else, as `sshd` asks of its host keys: refused
/// otherwise, naming the fix.
fn key_file_private(path: &Path, meta: &std::fs::Metadata) -> Result<(), ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() == euid && meta.mode() & 0o077 == 0 {
        return Ok(());
    }
    Err(ConfigError::Inconsistent(format!(
        "{} sets master_key but is {} (mode {:o}, owner uid {}): the key opens every \
         workspace; `chown {euid} {0}; chmod 600 {0}`, or pass the key in \
         SANDBOXD_MASTER_KEY instead",
        path.display(),
        match meta.uid() == euid {
            true => "open to other users",
            false => "another user's",
        },
        meta.mode() & 0o7777,
        meta.uid(),
    )))
}

/// `SANDBOXD_NETWORK` (`egress` or `none`), if set.
fn env_network(
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<sandboxd_engine::NetworkMode>, ConfigError> {
    let var = "SANDBOXD_NETWORK";
    match env(var).as_deref().map(str::trim) {
        None => Ok(None),
        Some("egress") => Ok(Some(sandboxd_engine::NetworkMode::Egress)),
        Some("none") => Ok(Some(sandboxd_engine::NetworkMode::None)),
        Some(other) => Err(ConfigError::Env {
            var,
            message: format!("{other:?} is neither egress nor none"),
        }),
    }
}

/// `SANDBOXD_RESOLVERS`: comma-separated IPv4 addresses, if set.
fn env_resolvers(
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Vec<std::net::Ipv4Addr>>, ConfigError> {
    let var = "SANDBOXD_RESOLVERS";
    env(var)
        .map(|raw| {
            raw.split(',')
                .map(|a| {
                    a.trim()
                        .parse()
                        .map_err(|e: std::net::AddrParseError| ConfigError::Env {
                            var,
                            message: format!("{a:?}: {e}"),
                        })
                })
                .collect()
        })
        .transpose()
}

/// A numeric environment variable, if set.
fn env_number<T: std::str::FromStr>(
    env: &impl Fn(&str) -> Option<String>,
    var: &'static str,
) -> Result<Option<T>, ConfigError>
where
    T::Err: std::fmt::Display,
{
    env(var)
        .map(|raw| {
            raw.trim().parse().map_err(|e: T::Err| ConfigError::Env {
                var,
                message: e.to_string(),
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    fn load(file: Option<&str>, env: &[(&str, &str)]) -> Result<ServerConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sandboxd.toml");
        if let Some(text) = file {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ServerConfig::load_with(file.map(|_| path.as_path()), |k| env.get(k).cloned())
    }

    #[test]
    fn insecure_registries_from_file_then_env() {
        let file = "insecure_registries = [\"reg.lan:5000\"]\n";
        let c = load(Some(file), &[]).unwrap();
        assert_eq!(c.insecure_registries, ["reg.lan:5000"]);
        let c = load(Some(file), &[("SANDBOXD_INSECURE_REGISTRIES", "a:1,b")]).unwrap();
        assert_eq!(c.insecure_registries, ["a:1", "b"]);
        assert!(matches!(
            load(Some("insecure_registries = [\"https://reg.lan\"]\n"), &[]),
            Err(ConfigError::Inconsistent(_))
        ));
        assert!(load(None, &[]).unwrap().insecure_registries.is_empty());
    }

    #[test]
    fn defaults() {
        let c = load(None, &[]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:7420");
        assert_eq!(c.data_dir, PathBuf::from("./.sandboxd"));
        assert_eq!(c.master_key, None);
    }

    #[test]
    fn env_overrides_file_overrides_defaults() {
        let file =
            "listen = \"0.0.0.0:9000\"\ndata_dir = \"/var/lib/sandboxd\"\nmaster_key = \"f\"\n";
        let c = load(Some(file), &[("SANDBOXD_MASTER_KEY", "e")]).unwrap();
        assert_eq!(c.listen.to_string(), "0.0.0.0:9000");
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/sandboxd"));
        assert_eq!(c.master_key.as_deref(), Some("e"));
        let c = load(Some(file), &[("SANDBOXD_LISTEN", "127.0.0.1:0")]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:0");
        assert_eq!(c.exec_kill_grace_seconds, 30);
        let c = load(None, &[("SANDBOXD_EXEC_KILL_GRACE_SECONDS", "1")]).unwrap();
        assert_eq!(c.exec_kill_grace_seconds, 1);
    }

    #[test]
    fn rejects_unknown_fields_and_bad_values() {
        assert!(matches!(
            load(Some("listen_addr = \"x\"\n"), &[]),
            Err(ConfigError::Parse { .. })
        ));
        assert!(matches!(
            load(None, &[("SANDBOXD_LISTEN", "nope")]),
            Err(ConfigError::Env { .. })
        ));
    }

    #[test]
    fn network_from_file_and_env() {
        use sandboxd_engine::NetworkMode;
        let c = load(None, &[]).unwrap();
        assert_eq!(
            (c.network, c.resolvers.clone()),
            (NetworkMode::Egress, None)
        );
        let c = load(
            Some("network = \"none\"\nresolvers = [\"192.0.2.53\"]\n"),
            &[],
        )
        .unwrap();
        assert_eq!(c.limits().default_network, NetworkMode::None);
        assert_eq!(
            c.resolvers,
            Some(vec![std::net::Ipv4Addr::new(192, 0, 2, 53)])
        );
        let env = [
            ("SANDBOXD_NETWORK", "egress"),
            ("SANDBOXD_RESOLVERS", "198.18.0.2, 198.18.0.3"),
        ];
        let c = load(Some("network = \"none\"\n"), &env).unwrap();
        assert_eq!(c.network, NetworkMode::Egress);
        assert_eq!(c.resolvers.map(|r| r.len()), Some(2));
        for bad in [
            ("SANDBOXD_NETWORK", "open"),
            ("SANDBOXD_RESOLVERS", "1.2.3"),
        ] {
            assert!(
                matches!(load(None, &[bad]), Err(ConfigError::Env { .. })),
                "{bad:?}"
            );
        }
        assert!(matches!(
            load(Some("network = \"open\"\n"), &[]),
            Err(ConfigError::Parse { .. })
        ));
    }

    #[test]
    fn capacity_from_file_and_env() {
        let c = load(Some("max_vcpu_total = 4\nmax_sandboxes = 9\n"), &[]).unwrap();
        assert_eq!((c.max_sandboxes, c.max_vcpu_total), (9, 4));
        assert_eq!(
            c.limits().disk_mb_per_sandbox,
            10 * 1024,
            "10 GiB by default"
        );
        assert_eq!(load(None, &[]).unwrap().warm_inits, 2);
        let c = load(Some("warm_inits = 0\n"), &[("SANDBOXD_WARM_INITS", "3")]).unwrap();
        assert_eq!(c.warm_inits, 3, "the environment wins over the file");
        assert_eq!(c.warm_inits_max, 32);
        assert_eq!(c.max_ptys_per_sandbox, 64);
        let c = load(
            Some("max_ptys_per_sandbox = 8\n"),
            &[("SANDBOXD_MAX_PTYS_PER_SANDBOX", "9")],
        )
        .unwrap();
        assert_eq!(c.max_ptys_per_sandbox, 9);
        assert_eq!(
            load(Some("max_ptys_per_sandbox = 8\n"), &[])
                .unwrap()
                .max_ptys_per_sandbox,
            8
        );
        let c = load(
            Some("warm_inits_max = 4\n"),
            &[("SANDBOXD_WARM_INITS_MAX", "9")],
        )
        .unwrap();
        assert_eq!(c.warm_inits_max, 9);
        assert_eq!(load(None, &[]).unwrap().warm_inits_start, 20);
        let c = load(
            Some("warm_inits_start = 4\n"),
            &[("SANDBOXD_WARM_INITS_START", "0")],
        )
        .unwrap();
        assert_eq!(c.warm_inits_start, 0);
        assert_eq!(load(None, &[]).unwrap().warm_images, 2);
        assert_eq!(load(Some("warm_images = 0\n"), &[]).unwrap().warm_images, 0);
        let c = load(Some("warm_images = 4\n"), &[("SANDBOXD_WARM_IMAGES", "1")]).unwrap();
        assert_eq!(c.warm_images, 1);
        assert_eq!(load(None, &[]).unwrap().shutdown_grace_seconds, 30);
        let c = load(
            Some("shutdown_grace_seconds = 5\n"),
            &[("SANDBOXD_SHUTDOWN_GRACE_SECONDS", "2")],
        )
        .unwrap();
        assert_eq!(c.shutdown_grace_seconds, 2);
        let answer = |c: ServerConfig| c.limits().agent_answer.as_secs();
        assert_eq!(answer(load(None, &[]).unwrap()), 30);
        let c = load(Some("agent_answer_seconds = 5\n"), &[]).unwrap();
        assert_eq!(answer(c), 5);
        let c = load(None, &[("SANDBOXD_AGENT_ANSWER_SECONDS", "0")]).unwrap();
        assert_eq!(answer(c), 1);
        let c = load(Some("disk_mb_per_sandbox = 2048\n"), &[]).unwrap();
        assert_eq!(c.limits().disk_mb_per_sandbox, 2048);
        let c = load(
            Some("disk_mb_per_sandbox = 2048\n"),
            &[("SANDBOXD_DISK_MB_PER_SANDBOX", "512")],
        )
        .unwrap();
        assert_eq!(
            c.limits().disk_mb_per_sandbox,
            512,
            "the environment wins over the file"
        );
        let env = [
            ("SANDBOXD_MAX_SANDBOXES", "1"),
            ("SANDBOXD_MAX_MEMORY_MIB_TOTAL", "2048"),
        ];
        let limits = load(Some("max_sandboxes = 9\n"), &env).unwrap().limits();
        assert_eq!(
            (limits.max_sandboxes, limits.max_memory_mb_total),
            (1, 2048)
        );
        assert_eq!(
            limits.max_vcpu_total,
            sandboxd_engine::Limits::default().max_vcpu_total
        );
        let bad = load(None, &[("SANDBOXD_MAX_SANDBOXES", "-1")]);
        assert!(matches!(
            bad,
            Err(ConfigError::Env {
                var: "SANDBOXD_MAX_SANDBOXES",
                ..
            })
        ));
    }

    #[test]
    fn disk_maximum_from_file_and_env_and_never_below_the_default() {
        let l = load(None, &[]).unwrap().limits();
        assert_eq!(
            (l.disk_mb_per_sandbox, l.max_disk_mb_per_sandbox),
            (10240, 10240)
        );
        let file = "disk_mb_per_sandbox = 1024\nmax_disk_mb_per_sandbox = 4096\n";
        let l = load(Some(file), &[]).unwrap().limits();
        assert_eq!(
            (l.disk_mb_per_sandbox, l.max_disk_mb_per_sandbox),
            (1024, 4096)
        );
        let env = [("SANDBOXD_MAX_DISK_MB_PER_SANDBOX", "2048")];
        let l = load(Some(file), &env).unwrap().limits();
        assert_eq!(l.max_disk_mb_per_sandbox, 2048, "the environment wins");
        let unlimited = [
            ("SANDBOXD_DISK_MB_PER_SANDBOX", "0"),
            ("SANDBOXD_MAX_DISK_MB_PER_SANDBOX", "0"),
        ];
        let l = load(None, &unlimited).unwrap().limits();
        assert_eq!((l.disk_mb_per_sandbox, l.max_disk_mb_per_sandbox), (0, 0));
        for bad in [
            vec![("SANDBOXD_DISK_MB_PER_SANDBOX", "10241")],
            vec![("SANDBOXD_DISK_MB_PER_SANDBOX", "0")],
            vec![("SANDBOXD_MAX_DISK_MB_PER_SANDBOX", "1024")],
        ] {
            let got = load(None, &bad);
            assert!(
                matches!(&got, Err(ConfigError::Inconsistent(m)) if m.contains("max_disk_mb")),
                "{bad:?}: {got:?}"
            );
        }
    }

    #[test]
    fn a_disk_below_the_minimum_is_refused_at_start() {
        let min = sandboxd_engine::disk::MIN_DISK_MB;
        let small = (min - 1).to_string();
        let refusals = [
            load(None, &[("SANDBOXD_DISK_MB_PER_SANDBOX", small.as_str())]),
            load(Some(&format!("disk_mb_per_sandbox = {small}\n")), &[]),
            load(Some("disk_mb_per_sandbox = 1\n"), &[]),
        ];
        for got in refusals {
            assert!(
                matches!(&got, Err(ConfigError::Inconsistent(m))
                    if m.contains("disk_mb_per_sandbox")
                        && m.contains("SANDBOXD_DISK_MB_PER_SANDBOX")
                        && m.contains(&format!("minimum of {min} MiB"))),
                "{got:?}"
            );
        }
        let env = [
            ("SANDBOXD_DISK_MB_PER_SANDBOX", "0"),
            ("SANDBOXD_MAX_DISK_MB_PER_SANDBOX", small.as_str()),
        ];
        let got = load(None, &env);
        assert!(
            matches!(&got, Err(ConfigError::Inconsistent(m))
                if m.contains("max_disk_mb_per_sandbox") && m.contains("minimum")),
            "{got:?}"
        );
        let min_s = min.to_string();
        let at_min = [
            ("SANDBOXD_DISK_MB_PER_SANDBOX", min_s.as_str()),
            ("SANDBOXD_MAX_DISK_MB_PER_SANDBOX", min_s.as_str()),
        ];
        let l = load(None, &at_min).expect("the minimum itself").limits();
        assert_eq!(
            (l.disk_mb_per_sandbox, l.max_disk_mb_per_sandbox),
            (min, min)
        );
        let l = load(
            None,
            &[
                ("SANDBOXD_DISK_MB_PER_SANDBOX", "0"),
                ("SANDBOXD_MAX_DISK_MB_PER_SANDBOX", "0"),
            ],
        )
        .expect("0 is no limit, not a small disk")
        .limits();
        assert_eq!(l.disk_mb_per_sandbox, 0);
    }

    #[test]
    fn ended_records_are_kept_a_week_by_default_and_never_under_a_day() {
        assert_eq!(load(None, &[]).unwrap().ended_retention_hours, 168);
        let file = "ended_retention_hours = 48\n";
        assert_eq!(load(Some(file), &[]).unwrap().ended_retention_hours, 48);
        let env = [("SANDBOXD_ENDED_RETENTION_HOURS", "0")];
        assert_eq!(load(Some(file), &env).unwrap().ended_retention_hours, 0);
        let short = [("SANDBOXD_ENDED_RETENTION_HOURS", "23")];
        let got = load(None, &short);
        assert!(
            matches!(&got, Err(ConfigError::Inconsistent(m)) if m.contains("ended_retention_hours")),
            "{got:?}"
        );
    }

    #[test]
    fn retentions_past_a_century_are_refused_at_load() {
        let most = MAX_ENDED_RETENTION_HOURS.to_string();
        let env = [("SANDBOXD_ENDED_RETENTION_HOURS", most.as_str())];
        assert_eq!(
            load(None, &env).unwrap().ended_retention_hours,
            MAX_ENDED_RETENTION_HOURS
        );
        for hours in ["100000000", "4294967295"] {
            let got = load(None, &[("SANDBOXD_ENDED_RETENTION_HOURS", hours)]);
            assert!(
                matches!(&got, Err(ConfigError::Inconsistent(m))
                    if m.contains("ended_retention_hours") && m.contains("past the most")),
                "{got:?}"
            );
        }
        let file = "audit_retention_days = 4294967295\n";
        let got = load(Some(file), &[]);
        assert!(
            matches!(&got, Err(ConfigError::Inconsistent(m)) if m.contains("audit_retention_days")),
            "{got:?}"
        );
    }

    #[test]
    fn debug_redacts_the_master_key() {
        let c = ServerConfig {
            master_key: Some("s3cret-key".into()),
            ..Default::default()
        };
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("s3cret-key") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn pids_per_sandbox_is_derived_from_the_host_unless_set_and_refused_out_of_range() {
        let c = load(None, &[]).expect("defaults");
        assert_eq!(c.pids_per_sandbox, None);
        assert_eq!(
            c.limits().pids_per_sandbox,
            host_tasks::derived(c.max_sandboxes, host_tasks::host_tasks())
        );
        let c = load(Some("pids_per_sandbox = 300\n"), &[]).expect("file");
        assert_eq!(c.limits().pids_per_sandbox, 300);
        let c = load(None, &[("SANDBOXD_PIDS_PER_SANDBOX", "2048")]).expect("env");
        assert_eq!(c.limits().pids_per_sandbox, 2048);
        let got = load(Some("pids_per_sandbox = 5\n"), &[]);
        assert!(
            matches!(&got, Err(ConfigError::Inconsistent(m)) if m.contains("pids_per_sandbox")),
            "{got:?}"
        );
    }

    /// Regression (REVIEW13 #8): a world-readable file with the master key was accepted.
    #[test]
    fn a_master_key_in_a_file_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sandboxd.toml");
        let none = |_: &str| None;
        std::fs::write(&path, "master_key = \"k\"\n").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let got = ServerConfig::load_with(Some(&path), none);
            assert!(
                matches!(&got, Err(ConfigError::Inconsistent(m)) if m.contains("chmod 600")),
                "mode {mode:o}: {got:?}"
            );
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = ServerConfig::load_with(Some(&path), none).expect("a private key file");
        assert_eq!(c.master_key.as_deref(), Some("k"));
        std::fs::write(&path, "max_sandboxes = 3\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = ServerConfig::load_with(Some(&path), none).expect("no key: any mode");
        assert_eq!(c.max_sandboxes, 3);
    }
}
