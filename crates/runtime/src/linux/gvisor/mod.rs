//! The gVisor tier: each sandbox runs under `runsc` (ptrace platform), so its processes
//! talk to gVisor's user-space kernel (the sentry) instead of the host's.
//!
//! What it shares with the container tier ([`LinuxRuntime`], which it wraps): the layer
//! store and images, the overlay root of image layers under a writable layer (mounted
//! by the host, so disk limits and captures work the same; runsc's gofer serves it to
//! the sentry), and the per-sandbox cgroup with the same limits (plus the sentry's own
//! overhead), which `runsc create` joins before it forks the sentry and the gofer.
//!
//! The agent is the host's `sandboxd` binary, bound read-only into the sandbox with the
//! host's loader and libraries (so it runs in any image) and started as the container's
//! PID 1 (`__gvisor-agent`). It listens on a Unix socket in a host directory bound into
//! the sandbox: runsc's `--host-uds=create` makes the gofer create a real host socket
//! for it, which the host connects to as it does to a container's agent. That keeps
//! the agent protocol and the engine's client unchanged, needs no network inside, and
//! the socket lives in the 0700 state dir like a container's.
//!
//! Networking: without egress a sandbox has only gVisor's loopback (runsc
//! `--network=none`). With egress it gets the container tier's veth from the same pool
//! under the same nftables chain, its inner end in a network namespace made before the
//! sandbox; runsc (`--network=sandbox`, the OCI spec naming that namespace) boots the
//! sentry's own network stack over it, which takes the link's address and default
//! route. The host kernel's stack in that namespace then carries no address of its
//! own: the sandbox's TCP/IP is gVisor's, and only its packets cross the veth.

pub mod agent_dir;
mod bundle;
pub mod checkpoint;
mod destroy;
pub mod features;
mod interrupted;
mod legacy;
mod remount;
pub mod runsc;
mod start;
mod warm;
mod warm_watch;
pub(in crate::linux) use warm::DIR_PREFIX as WARM_DIR_PREFIX;

use super::{capture, layers::remove_tree, LinuxConfig, LinuxRuntime};
use crate::{
    DiskSpace, ExitWatch, ImageLayers, Layer, MemorySnapshot, NetworkMode, NetworkSpec,
    ResourceUsage, Runtime, RuntimeError, SandboxHandle, SandboxSpec,
};
use runsc::Runsc;
use std::collections::HashSet;
use std::os::unix::fs::DirBuilderExt;
use uuid::Uuid;

pub use bundle::QUIESCED;
pub use start::{MEMORY_OVERHEAD_MB, PIDS_OVERHEAD};
pub use warm::HOSTNAME as WARM_HOSTNAME;

/// The gVisor [`Runtime`].
pub struct GvisorRuntime {
    linux: LinuxRuntime,
    runsc: Runsc,
    /// Sandboxes started ahead of time; `None` starts every sandbox cold.
    warm: Option<warm::GvisorWarm>,
}

impl GvisorRuntime {
    /// Opens the tier over the same data dir layout as the container tier; fails with a
    /// clear error when `runsc` is not installed.
    pub fn new(config: LinuxConfig) -> Result<Self, RuntimeError> {
        let exe =
            runsc::find().ok_or_else(|| RuntimeError::Unsupported(runsc::missing_reason()))?;
        let root = config.data_dir.join("runsc");
        super::private_dir::ensure(&config.data_dir)?;
        super::private_dir::ensure(&root)?;
        let rt = GvisorRuntime {
            linux: LinuxRuntime::new(config)?,
            runsc: Runsc {
                features: features::Features::detect(&exe),
                exe,
                root,
            },
            warm: None,
        };
        warm::sweep_stale(&rt);
        Ok(rt)
    }

    /// Ties each sandbox this tier starts to this process, as
    /// [`LinuxRuntime::with_tethers`] does (its owner mark; a gVisor sentry is not
    /// tethered, so a killed run's sandbox runs until the next sweep ends it).
    pub fn with_tethers(mut self, tethers: std::sync::Arc<super::Tethers>) -> Self {
        self.linux.tethers = Some(tethers);
        self
    }

    /// Keeps `count` sandboxes started ahead of time (0 = none), without network, made
    /// once [`GvisorRuntime::fill_warm_pool`] says their disk size: a start of the
    /// default image, that disk and no network takes one, and sets its hostname when it
    /// is not [`WARM_HOSTNAME`] (see `warm.rs`).
    pub fn with_warm_pool(self, count: usize) -> Result<Self, RuntimeError> {
        self.warm_pool(count, false)
    }

    /// Keeps up to `count` sandboxes started ahead of time (0 = none) once starts ask
    /// for them: nothing runs until the first start without network and without extra
    /// layers (a request's, template's or workspace's gVisor tier on a server whose
    /// default is another) starts cold; entries of its image and disk size are then
    /// made in the background for the next ones. A later cold start of another image or
    /// disk moves the pool there. For servers whose gVisor creates are occasional.
    pub fn with_warm_pool_on_demand(self, count: usize) -> Result<Self, RuntimeError> {
        self.warm_pool(count, true)
    }

    fn warm_pool(mut self, count: usize, on_demand: bool) -> Result<Self, RuntimeError> {
        self.warm = match count {
            0 => None,
            _ => {
                let maker = GvisorRuntime::new(self.linux.config.clone())?;
                Some(warm::GvisorWarm::new(maker, count, on_demand))
            }
        };
        Ok(self)
    }

    /// Starts filling the warm pool with sandboxes of the default image and a `disk_mb`
    /// MiB disk (in the background).
    pub fn fill_warm_pool(&self, disk_mb: u32) {
        let Some(pool) = &self.warm else {
            return;
        };
        let spec = SandboxSpec {
            id: Uuid::nil(),
            image: super::DEFAULT_IMAGE.into(),
            extra_layers: vec![],
            hostname: warm::HOSTNAME.into(),
            vcpu: 1,
            memory_mb: 0,
            pids_max: 0,
            disk_mb,
            isolation: crate::Isolation::Gvisor,
        };
        match self.linux.layer_stack(&spec) {
            Ok((layers, _pin)) => pool.prefer(warm::Shape {
                image: spec.image,
                layers,
                disk_mb,
            }),
            Err(e) => tracing::warn!(error = %e, "no warm gVisor sandboxes"),
        }
    }

    /// Warm sandboxes ready to be taken now.
    pub fn warm_pool_ready(&self) -> usize {
        self.warm.as_ref().map_or(0, |pool| pool.ready())
    }

    /// Destroys the warm sandboxes (dropping the runtime does too); started sandboxes
    /// are left alone.
    pub fn drain_warm_pool(&self) {
        if let Some(pool) = &self.warm {
            pool.drain();
        }
    }

    /// The dir memory snapshots' images are kept in (one dir per snapshot id).
    pub fn memory_snapshots_dir(&self) -> std::path::PathBuf {
        self.linux.config.data_dir.join("memory-snapshots")
    }

    /// Enables egress networking for [`Runtime::start_with_network`] (the container
    /// tier's pool, policy and host state).
    pub fn with_network(mut self, config: super::NetConfig) -> Self {
        self.linux = self.linux.with_network(config);
        self
    }

    /// The sandbox's own address when it has egress networking.
    pub fn sandbox_address(&self, id: Uuid) -> Option<std::net::Ipv4Addr> {
        self.linux.sandbox_address(id)
    }

    /// What the `runsc` in use supports.
    pub fn runsc_features(&self) -> &features::Features {
        &self.runsc.features
    }

    /// Whether `runsc` is installed (`SANDBOXD_RUNSC`, else on `PATH`).
    pub fn available() -> bool {
        runsc::find().is_some()
    }

    /// Handles of every started sandbox whose state dir is still on disk.
    pub fn stored_handles(&self) -> Vec<SandboxHandle> {
        self.linux.stored_handles()
    }

    /// The cgroup hierarchy its sandboxes' cgroups are made in.
    pub fn cgroups(&self) -> &super::Cgroups {
        self.linux.cgroups()
    }

    /// The runsc state root (`--root`).
    pub fn runsc_root(&self) -> &std::path::Path {
        &self.runsc.root
    }

    /// Whether the sandbox is frozen in memory (`runsc pause`).
    pub fn is_paused(&self, handle: &SandboxHandle) -> bool {
        self.runsc.status(&warm::runsc_id(handle)).as_deref() == Some("paused")
    }
}

impl Runtime for GvisorRuntime {
    fn name(&self) -> &'static str {
        "gvisor"
    }

    /// Its sandboxes' marks are the container backend's (one data dir, one tether).
    fn claim(&self, id: uuid::Uuid) -> Result<(), RuntimeError> {
        self.linux.claim(id)
    }

    fn unclaim(&self, id: uuid::Uuid) {
        self.linux.unclaim(id)
    }

    fn owned_elsewhere(&self, id: uuid::Uuid) -> bool {
        self.linux.owned_elsewhere(id)
    }

    fn offers(&self, isolation: crate::Isolation) -> Result<(), RuntimeError> {
        match isolation {
            crate::Isolation::Gvisor => Ok(()),
            other => Err(RuntimeError::Unsupported(format!(
                "the gvisor backend has no {other} tier"
            ))),
        }
    }

    fn can_pin(&self, _: crate::Isolation) -> bool {
        // The sentry keeps its own vCPU count and a restore from disk starts host
        // processes outside any cpuset: dedicated CPUs would not hold (README).
        false
    }

    fn start(&self, spec: &SandboxSpec) -> Result<SandboxHandle, RuntimeError> {
        crate::faults::check("start.gvisor")?;
        if let Some(pool) = &self.warm {
            // The layers stay pinned (the collector lock held shared) until the taken
            // entry's dir, which lists them, has its new name: a collection reading the
            // state dirs meanwhile could miss a dir being renamed.
            let layers = match self.linux.layer_stack(spec) {
                Ok((layers, _pin)) => {
                    if let Some(handle) = pool.take(self, spec, &layers) {
                        return Ok(handle);
                    }
                    Some(layers)
                }
                Err(_) => None,
            };
            let started = start::start(self, spec, &NetworkSpec::none());
            // Asked for once this start is done, so that making entries does not compete
            // with it.
            if let (Some(layers), true) = (layers, spec.extra_layers.is_empty() && started.is_ok())
            {
                pool.demand(warm::Shape {
                    image: spec.image.clone(),
                    layers,
                    disk_mb: spec.disk_mb,
                });
            }
            return started;
        }
        start::start(self, spec, &NetworkSpec::none())
    }

    fn start_with_network(
        &self,
        spec: &SandboxSpec,
        network: &NetworkSpec,
    ) -> Result<SandboxHandle, RuntimeError> {
        if network.mode == NetworkMode::None {
            return self.start(spec);
        }
        crate::faults::check("start.gvisor")?;
        start::start(self, spec, network)
    }

    fn is_alive(&self, handle: &SandboxHandle) -> bool {
        // On disk, a sandbox lives in its memory image, as long as what its restore
        // needs on the host does (not after a host restart for one with egress).
        if checkpoint::on_disk(handle) {
            let lost =
                checkpoint::network_lost(self, handle).or_else(|| remount::lost(self, handle));
            if let Some(why) = &lost {
                tracing::warn!(sandbox = %handle.id, "on disk but cannot be restored: {why}");
            }
            return lost.is_none();
        }
        super::sys::is_same_live_process(handle.agent_pid, handle.agent_start_ticks)
    }

    fn watch_exit(&self, handle: &SandboxHandle) -> ExitWatch {
        match checkpoint::on_disk(handle) {
            true => ExitWatch::Unsupported, // no process to watch until it is restored
            false => super::watch::watch_exit(handle),
        }
    }

    fn can_checkpoint(&self, handle: &SandboxHandle) -> bool {
        // With egress only when this runsc has `--net-disconnect-ok`: then a checkpoint
        // resets the link's open TCP connections (connected or closing, TIME_WAIT
        // included) and goes on. An older runsc cannot save such an endpoint and a
        // checkpoint that meets one fails and ends the sandbox, its processes and memory
        // lost; nothing on the host can tell such endpoints beforehand, so there an
        // egress sandbox pauses in memory and its snapshots are filesystem-only.
        // (`checkpoint`/`restore` themselves handle a network: a fork of a sandbox
        // without one can be restored with egress.) A sandbox holding a host socket is
        // refused by the checkpoint's own check, and keeps running.
        self.runsc.features.net_disconnect_ok
            || !handle
                .state_dir
                .join(crate::linux::rootfs::NETNS_FILE)
                .exists()
    }

    fn is_checkpointed(&self, handle: &SandboxHandle) -> bool {
        checkpoint::on_disk(handle)
    }

    fn checkpoint(&self, handle: &SandboxHandle) -> Result<SandboxHandle, RuntimeError> {
        crate::faults::check("checkpoint")?;
        checkpoint::checkpoint(self, handle)
    }

    fn restore(&self, handle: &SandboxHandle) -> Result<SandboxHandle, RuntimeError> {
        crate::faults::check("restore")?;
        checkpoint::restore(self, handle)
    }

    fn restored(&self, handle: &SandboxHandle) -> Option<SandboxHandle> {
        checkpoint::restored(self, handle)
    }

    fn freeze(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        crate::faults::check("freeze")?;
        if checkpoint::on_disk(handle) || self.is_paused(handle) {
            return Ok(());
        }
        self.runsc.run(None, &["pause", &warm::runsc_id(handle)])?;
        Ok(())
    }

    fn is_frozen(&self, handle: &SandboxHandle) -> bool {
        !checkpoint::on_disk(handle) && self.is_paused(handle)
    }

    fn thaw(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        crate::faults::check("thaw")?;
        if !self.is_paused(handle) {
            return Ok(());
        }
        self.runsc.run(None, &["resume", &warm::runsc_id(handle)])?;
        Ok(())
    }

    fn can_snapshot_memory(&self, handle: &SandboxHandle) -> bool {
        self.can_checkpoint(handle)
    }

    fn snapshot_memory(
        &self,
        handle: &SandboxHandle,
        id: Uuid,
    ) -> (Result<MemorySnapshot, RuntimeError>, SandboxHandle) {
        if let Err(e) = crate::faults::check("snapshot_memory") {
            return (Err(e), handle.clone());
        }
        let dir = self.memory_snapshots_dir();
        let made = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir);
        if let Err(e) = made {
            let what = super::io("creating the memory snapshots dir", &dir)(e);
            return (Err(what), handle.clone());
        }
        checkpoint::snapshot(self, handle, &dir.join(id.to_string()))
    }

    fn start_from_memory(
        &self,
        spec: &SandboxSpec,
        network: &NetworkSpec,
        image: &std::path::Path,
    ) -> Result<SandboxHandle, RuntimeError> {
        crate::faults::check("start.gvisor")?;
        start::start_from(self, spec, network, Some(image))
    }

    fn delete_memory_snapshot(&self, image: &std::path::Path) -> Result<(), RuntimeError> {
        // Only ever a dir of ours (the path comes from the store).
        if image.parent() != Some(self.memory_snapshots_dir().as_path()) {
            return Err(RuntimeError::Unsupported(format!(
                "{} is no memory snapshot of this server",
                image.display()
            )));
        }
        match std::fs::remove_dir_all(image) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(super::io("removing a memory snapshot", image)(e))
            }
            _ => Ok(()),
        }
    }

    fn sweep_memory_snapshots(
        &self,
        keep: &HashSet<std::path::PathBuf>,
    ) -> Vec<std::path::PathBuf> {
        let dir = self.memory_snapshots_dir();
        // Records naming images elsewhere (a data dir moved or restored at another
        // path): their names cannot be matched safely, so nothing is removed.
        if let Some(other) = keep.iter().find(|p| p.parent() != Some(dir.as_path())) {
            tracing::warn!(
                recorded = %other.display(),
                dir = %dir.display(),
                "a recorded memory image lies outside this data dir's memory snapshots: images not swept"
            );
            return Vec::new();
        }
        // Compared by snapshot id (the dir's name), only on dirs named as ids.
        let kept: HashSet<&std::ffi::OsStr> = keep.iter().filter_map(|p| p.file_name()).collect();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for path in entries.filter_map(|e| Some(e.ok()?.path())) {
            let Some(name) = path.file_name() else {
                continue;
            };
            let is_id = name.to_str().is_some_and(|n| Uuid::parse_str(n).is_ok());
            if !is_id || kept.contains(name) {
                continue;
            }
            match std::fs::remove_dir_all(&path) {
                Ok(()) => removed.push(path),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot remove an unrecorded memory snapshot")
                }
            }
        }
        removed
    }

    fn capture_layer(&self, handle: &SandboxHandle) -> Result<Layer, RuntimeError> {
        self.capture_layer_until(handle, &crate::Cancel::new())
    }

    fn snapshot_bound(
        &self,
        handle: &SandboxHandle,
    ) -> Result<Option<crate::CaptureBound>, RuntimeError> {
        super::capture_bound::measure(handle).map(Some)
    }

    fn capture_layer_until(
        &self,
        handle: &SandboxHandle,
        cancel: &crate::Cancel,
    ) -> Result<Layer, RuntimeError> {
        crate::faults::check("capture")?;
        cancel
            .check()
            .map_err(super::io("capturing a layer", &handle.state_dir))?;
        // On disk nothing writes: the layer is copied as it is.
        let was_paused = checkpoint::on_disk(handle) || self.is_paused(handle);
        if !was_paused {
            self.freeze(handle)?;
        }
        let scratch = self.linux.layers.scratch()?;
        let mut copied = capture::copy_upper(handle, &scratch, cancel)
            .and_then(|()| crate::faults::check("capture.copied"));
        if !was_paused {
            copied = copied.and(self.thaw(handle));
        }
        // The agent's mount points are the backend's, not the sandbox's files.
        let agent_dir = scratch.join(bundle::AGENT_DIR.trim_start_matches('/'));
        if agent_dir.is_dir() {
            remove_tree(&agent_dir);
        }
        let result = copied.and_then(|()| self.linux.layers.commit_until(&scratch, cancel));
        if result.is_err() {
            remove_tree(&scratch);
        }
        result
    }

    fn destroy(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        destroy::destroy(self, handle)
    }

    fn reconcile(&self, keep: &HashSet<Uuid>, ended: &HashSet<Uuid>) -> Vec<Uuid> {
        // runsc's state of containers no live record keeps goes first (their sentries
        // are killed with their cgroups by the container tier's reconcile). A kept
        // sandbox made from a warm entry runs in the entry's container; the pool's own
        // entries are kept too.
        interrupted::clear(self, keep);
        // Kept sandboxes on disk whose root a host restart unmounted: mounted again now,
        // so that their files (captures, the next restore) are there.
        // Running sandboxes of an earlier sandboxd's agent-dir layout are made safe
        // (see `legacy`); what that set on the files of others is cleared, so that
        // their state dirs can go.
        for handle in self.stored_handles() {
            if keep.contains(&handle.id) && checkpoint::on_disk(&handle) {
                if let Err(e) = remount::ensure(self, &handle) {
                    tracing::error!(sandbox = %handle.id, error = %e, "cannot mount the root of a sandbox on disk again; its restore will fail");
                }
            } else if keep.contains(&handle.id) && legacy::is_legacy(&handle) {
                legacy::secure(self, &handle);
            } else if !keep.contains(&handle.id) {
                legacy::release(&handle.state_dir);
            }
        }
        let sandboxes = self.linux.sandboxes_dir();
        let mut containers: HashSet<Uuid> = keep
            .iter()
            .map(|id| {
                warm::runsc_id_in(&sandboxes.join(id.to_string()))
                    .and_then(|r| Uuid::parse_str(&r).ok())
                    .unwrap_or(*id)
            })
            .collect();
        if let Some(pool) = &self.warm {
            containers.extend(pool.keys());
        }
        if let Ok(entries) = std::fs::read_dir(&self.runsc.root) {
            for entry in entries.filter_map(|e| e.ok()) {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(id) = name.get(..36).and_then(|s| Uuid::parse_str(s).ok()) else {
                    continue;
                };
                // Not a live run's, mid-create (no record yet): that run ends it.
                if !containers.contains(&id) && !self.linux.run_holds(id) {
                    self.runsc.delete(&id.to_string());
                    for file in self.runsc.state_files(&id.to_string()) {
                        let _ = std::fs::remove_file(&file);
                    }
                }
            }
        }
        self.linux.reconcile(keep, ended)
    }

    fn usage(&self, handle: &SandboxHandle) -> Result<ResourceUsage, RuntimeError> {
        self.linux.usage(handle)
    }

    fn warm_pool(&self) -> Option<crate::WarmPoolStats> {
        self.warm.as_ref().map(|pool| pool.stats())
    }

    fn warm_pools(&self) -> Vec<(crate::Isolation, crate::WarmPoolStats)> {
        self.warm_pool()
            .map(|p| (crate::Isolation::Gvisor, p))
            .into_iter()
            .collect()
    }

    fn resolve_image(&self, name: &str) -> Result<ImageLayers, RuntimeError> {
        self.linux.resolve_image(name)
    }

    fn read_image_file(
        &self,
        layers: &[String],
        path: &str,
        max: u64,
    ) -> Result<crate::ImageFile, RuntimeError> {
        self.linux.read_image_file(layers, path, max)
    }

    fn delete_layer(&self, digest: &str) -> Result<(), RuntimeError> {
        self.linux.delete_layer(digest)
    }

    fn disk_space(&self) -> Result<Option<DiskSpace>, RuntimeError> {
        self.linux.disk_space()
    }
}
