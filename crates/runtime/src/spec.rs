//! Plain-data descriptions of a sandbox to start, a started sandbox, images and layers.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use uuid::Uuid;

/// One content-addressed, read-only filesystem layer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Layer {
    /// Lowercase hex sha256 of the layer's canonical tar stream.
    pub digest: String,
    /// Bytes the layer occupies on disk (sum of regular file sizes).
    pub size_bytes: u64,
}

/// A sandbox's memory and filesystem taken together, from which sandboxes can start
/// with its processes running ([`crate::Runtime::start_from_memory`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySnapshot {
    /// The writable layer as it was, in the layer store (new sandboxes stack it).
    pub layer: Layer,
    /// The dir holding the memory image (`checkpoint.img`).
    pub image: std::path::PathBuf,
}

/// An image: read-only layers, lowest first, plus what the backend needs to mount it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageLayers {
    /// Image name it was resolved from.
    pub name: String,
    /// Layer digests, lowest first.
    pub layers: Vec<String>,
    /// The image's own configuration (OCI `config`); empty for the built-in image.
    #[serde(default)]
    pub config: ImageConfig,
    /// The host's /usr is bound read-only on its /usr, as on the built-in image (an image
    /// built from `default` with a Dockerfile keeps needing it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_usr: bool,
}

/// What an OCI image's configuration says about the commands run from it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageConfig {
    /// `KEY=VALUE` entries, in the image's order.
    #[serde(default)]
    pub env: Vec<String>,
    /// Default working directory of commands (absolute).
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Default user (`name`, `uid`, `uid:gid`…) as the image gives it.
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub entrypoint: Vec<String>,
    #[serde(default)]
    pub cmd: Vec<String>,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Digest of the manifest it came from (`sha256:…`), when pulled or imported.
    #[serde(default)]
    pub manifest_digest: Option<String>,
}

/// A file read from an image's layers on the host ([`crate::Runtime::read_image_file`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageFile {
    Absent,
    Content(Vec<u8>),
    /// There, but not read: why (a symlink on the way, too large, not a regular file).
    Unreadable(String),
}

impl ImageConfig {
    /// The image's environment as pairs (entries without `=` are left out).
    pub fn env_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.env.iter().filter_map(|e| e.split_once('='))
    }
}

/// Everything needed to start one sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub id: Uuid,
    /// Base image (`"default"`, a template name…).
    pub image: String,
    /// Extra layers on top of the image (snapshots), lowest first.
    pub extra_layers: Vec<String>,
    pub hostname: String,
    /// CPU quota in whole vCPUs.
    pub vcpu: u32,
    pub memory_mb: u32,
    /// Maximum tasks (processes + threads) in the sandbox.
    pub pids_max: u32,
    /// Size of the writable layer in MiB (ENOSPC inside past it); 0 is unlimited.
    #[serde(default)]
    pub disk_mb: u32,
    /// The tier it runs on (a backend offering several starts it on this one).
    #[serde(default)]
    pub isolation: crate::Isolation,
}

/// Soft guarantees and placement applied to a started sandbox (OpenRelay's requests).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Requests {
    /// CPU the sandbox is guaranteed under contention, in thousandths of a vCPU
    /// (a weight relative to other sandboxes; the quota stays its limit).
    pub cpu_millis: u32,
    /// Memory kept from reclaim under host pressure (a soft limit below the hard one).
    pub memory_mb: u32,
    /// Dedicate this many host CPUs to the sandbox alone (among pinned sandboxes).
    pub pinned_vcpus: Option<u32>,
}

/// A started sandbox, as plain data the engine persists and hands back.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SandboxHandle {
    pub id: Uuid,
    /// Agent (PID 1 inside) as a host PID.
    pub agent_pid: i32,
    /// Start time of the agent process (field 22 of /proc/PID/stat) so a recycled PID is
    /// never mistaken for the agent.
    pub agent_start_ticks: u64,
    /// Unix socket the agent listens on (host path).
    pub agent_socket: PathBuf,
    /// Per-sandbox state directory on the host.
    pub state_dir: PathBuf,
    /// First host uid/gid of the sandbox's 65536-wide id range (root inside).
    pub host_id_base: u32,
    /// Whether this start took a warm init (for metrics; not persisted).
    #[serde(default, skip_serializing)]
    pub warm: bool,
    /// The tier it runs on, set by the backend that started it (handles from before
    /// tiers were recorded read as `container`; the engine corrects them from its
    /// records).
    #[serde(default)]
    pub isolation: crate::Isolation,
}

/// Room for writable layers on the filesystem that holds them, as the backend measures
/// it: what is free there and what the layers already on it occupy (their sparse images'
/// allocated blocks), in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskSpace {
    /// Free bytes an unprivileged writer may still use (`statvfs` `f_bavail`).
    pub available: u64,
    /// Bytes the existing sandboxes' layer images occupy (they count as room for those
    /// layers, which may grow back into it).
    pub layers: u64,
    /// Bytes the filesystem could ever hold for unprivileged writers (its size less the
    /// blocks reserved for root): what nothing that ends or is deleted can raise.
    pub total: u64,
    /// Free inodes an unprivileged writer may still use (`statvfs` `f_favail`): every
    /// entry a capture stores takes one, whatever its size. `u64::MAX` on a filesystem
    /// with no inode table (btrfs, tmpfs with `nr_inodes=0`: `f_files` is 0 there).
    pub inodes_available: u64,
}

/// The most a capture of a sandbox's writable layer would store now: the blocks its
/// entries occupy and the entries themselves (each one an inode of the layer store).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureBound {
    pub bytes: u64,
    pub entries: u64,
}

/// Resource usage of a sandbox.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResourceUsage {
    pub cpu_usage_ns: u64,
    pub memory_bytes: u64,
    /// Highest memory use since the sandbox started (0 when the backend cannot tell).
    #[serde(default)]
    pub memory_peak_bytes: u64,
    pub pids: u64,
    /// Bytes written to the writable layer (allocated blocks of its image, or of its
    /// directory when it has no size limit).
    #[serde(default)]
    pub disk_used_bytes: u64,
    /// Bytes the sandbox's network interfaces received (loopback excluded).
    #[serde(default)]
    pub net_rx_bytes: u64,
    /// Bytes the sandbox's network interfaces sent (loopback excluded).
    #[serde(default)]
    pub net_tx_bytes: u64,
}

/// The warm-init pool as metrics see it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WarmPoolStats {
    /// Inits ready to be taken now.
    pub ready: u64,
    /// Starts that took a warm init.
    pub hits: u64,
    /// Starts that found none fitting and started cold.
    pub misses: u64,
    /// Inits of the common shape the pool aims to keep now (its base size, or more
    /// while bursts grow it).
    pub target: u64,
}
