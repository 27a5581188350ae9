//! The Linux-native backend: user/pid/mount/uts/ipc/net/cgroup namespaces, an overlayfs
//! root over idmapped read-only layers, cgroup v1/v2 limits, and the agent as PID 1.

mod bounds;
mod capture;
mod capture_bound;
mod cgroup;
mod cgroup_self_move;
mod deferred;
mod destroy;
mod disk;
mod disk_space;
mod disk_spares;
mod disk_trash;
pub mod file_lock;
/// The file name of a sandbox's disk image in its state dir (read by image pulls' room checks).
pub use disk::IMAGE_NAME as DISK_IMAGE_NAME;
pub mod gvisor;
mod handle_file;
pub mod handshake;
mod held_fork;
mod held_init;
pub mod image_files;
pub mod images;
pub mod init;
pub mod init_child;
mod init_process;
pub mod layer_pins;
pub mod layers;
mod net;
mod overlay;
mod parent_record;
pub mod private_dir;
mod reconcile;
mod refill;
mod requests;
pub mod room_claims;
mod rootfs;
pub mod secure_chain;
mod slots;
mod sparse;
mod spread_dirs;
mod start;
mod sys;
mod tether;
mod unpark;
mod usage;
mod warm;
mod warm_counts;
mod watch;
mod whole_file;

use crate::{
    DiskSpace, ExitWatch, ImageLayers, Layer, ResourceUsage, Runtime, RuntimeError, SandboxHandle,
    SandboxSpec,
};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use uuid::Uuid;

pub use bounds::{open_files_limit, DEFAULT_MAX_PTYS};
pub use cgroup::Cgroups;
pub use held_init::{HeldInit, HELD_ARG};
pub use images::DEFAULT_IMAGE;
pub use net::NetConfig;
pub use slots::host_leases as host_slot_leases;
pub use tether::{owner_mark, wait_for_runs, Orphan, Tethers};

/// Whether sandboxd's shared nftables table exists in this network namespace (the
/// bench waits for it to go before it times a run that finds none).
pub fn shared_table_exists() -> bool {
    net::table_exists()
}

/// How long a parked egress network lingers untaken before its reaper removes it (and,
/// with the host's last one, the shared table).
pub fn parked_network_linger() -> std::time::Duration {
    net::parked::linger()
}

/// The detached process removing parked egress networks once they have lingered
/// untaken (the sandboxd binary's hidden `__net-reaper STATE_DIR`).
pub fn net_reaper_main(state_dir: &std::path::Path) -> Result<(), RuntimeError> {
    net::parked::reaper_main(state_dir)
}

/// Where the backend keeps its state and how it starts a sandbox's init.
#[derive(Debug, Clone)]
pub struct LinuxConfig {
    /// Holds `layers/`, `images/` and `sandboxes/<id>/` (id slots are leased host-wide,
    /// in `/run/sandboxd/ids`).
    pub data_dir: PathBuf,
    /// The `sandboxd` binary (its `__sandbox-init` subcommand becomes the agent).
    pub init_exe: PathBuf,
    /// Arguments before `--sync-fd N`, normally `["__sandbox-init"]`.
    pub init_args: Vec<String>,
    /// Name of our own parent cgroup, normally `"sandboxd"`.
    pub cgroup_parent: String,
    /// PTYs one sandbox may have open at once ([`DEFAULT_MAX_PTYS`]; 0: only the
    /// host-wide `kernel.pty.max` bounds it).
    pub max_ptys_per_sandbox: u32,
}

/// Holds this process's disk upkeep (the next spare disk's copy, the removal of
/// discarded images) until [`finish_deferred_disk_work`]: a one-shot run calls this
/// before it opens a runtime, so that its start has both CPUs and the disk to itself.
pub fn defer_disk_work() {
    disk_spares::defer_refills();
    disk_trash::defer_emptying();
}

/// Does the disk upkeep [`defer_disk_work`] held back, on this thread.
pub fn finish_deferred_disk_work() {
    disk_spares::refill_deferred();
    disk_trash::empty_deferred();
}

/// Waits for this process's removal of discarded disk images (the leftovers of earlier
/// processes, removed on a background thread when a runtime opens the data dir) to
/// finish: a short-lived process calls this before it exits.
pub fn wait_for_disk_trash() {
    disk_trash::wait_idle();
}

/// The Linux-native [`Runtime`].
pub struct LinuxRuntime {
    config: LinuxConfig,
    cgroups: Cgroups,
    slots: slots::Slots,
    layers: layers::LayerStore,
    /// Serialises building the built-in images.
    image_lock: Mutex<()>,
    /// Egress networking; `None` gives sandboxes only `lo`.
    network: Option<NetConfig>,
    /// Inits started ahead of time; `None` starts every init cold.
    warm: Option<warm::WarmPool>,
    /// The init a one-shot runtime began making at its open, for its start.
    early: Option<warm::EarlyInit>,
    /// Host sides of egress networks made ahead of time (with warm inits).
    spare_nets: Option<net::spares::SpareNets>,
    /// Starts that took a warm init, and those that found none.
    warm_counts: warm_counts::WarmCounts,
    /// Leaves destroyed sandboxes' disk images in the trash for the next runtime that
    /// opens the data dir, instead of deleting them before destroy returns.
    defer_disk_removal: bool,
    /// Parks plain egress networks at destroy for the next start (`net::parked`).
    park_networks: bool,
    /// Whether this runtime made its parent cgroup: it removes it again at
    /// [`LinuxRuntime::drain_warm_inits`] and on drop if no sandbox is left in it.
    made_cgroup_parent: bool,
    /// Ties started sandboxes to this process (`tether`); `None` lets them outlive it.
    tethers: Option<std::sync::Arc<tether::Tethers>>,
}

impl LinuxRuntime {
    /// Checks the host (root, cgroups), makes the data directories, and makes this
    /// process a child subreaper so it can reap the agents of sandboxes it destroys.
    pub fn new(config: LinuxConfig) -> Result<Self, RuntimeError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(RuntimeError::Unsupported(
                "the Linux backend needs to run as root".into(),
            ));
        }
        let (cgroups, made) = Cgroups::detect_made(&config.cgroup_parent)?;
        // Ours to remove once empty: made now, or made by a process that is gone.
        let made_cgroup_parent = parent_record::claim(
            Path::new(parent_record::HOST_DIR),
            &config.cgroup_parent,
            made,
        );
        // Sandbox-made files (a setuid-root program a tenant snapshots) lie below: only
        // root may enter.
        private_dir::ensure(&config.data_dir)?;
        private_dir::ensure(&config.data_dir.join("sandboxes"))?;
        // The sandboxes' dirs spread over the filesystem's block groups (`spread_dirs`).
        spread_dirs::mark_top(&config.data_dir.join("sandboxes"));
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        let slots = slots::Slots::new(&config.data_dir)?;
        warm::sweep_stale(&config.data_dir, &cgroups, &slots, warm::EmptyDirs::Remove);
        disk_trash::empty_in_background(&disk_trash::dir(&config.data_dir));
        Ok(LinuxRuntime {
            slots,
            layers: layers::LayerStore::new(&config.data_dir)?,
            cgroups,
            config,
            image_lock: Mutex::new(()),
            network: None,
            warm: None,
            early: None,
            spare_nets: None,
            warm_counts: Default::default(),
            defer_disk_removal: false,
            park_networks: false,
            made_cgroup_parent,
            tethers: None,
        })
    }

    /// Leaves the disk images of the sandboxes this runtime destroys for the next
    /// runtime that opens the data dir to delete (on a background thread), for a
    /// short-lived process such as `sandboxd run`, whose exit would otherwise wait for
    /// the host filesystem to free the image. Until then the image's space stays taken.
    pub fn with_deferred_disk_removal(mut self) -> Self {
        self.defer_disk_removal = true;
        self
    }

    /// Begins making, now and in the background, the init of this (one-shot) runtime's
    /// next start with a `disk_mb` MiB disk, as a warm entry: its spawn, first cgroup
    /// move, id maps and disk overlap what the caller does before the start, which takes
    /// it (waiting for its make if need be). With `held` (spawned at the process's
    /// start), that init is begun instead of one spawned then. Untaken, it is removed by
    /// [`LinuxRuntime::discard_early_init`] or on drop. Not for runtimes with warm inits.
    /// For a start of the built-in image (`image`), the init goes on as a pool's entry
    /// does: that root mounted, its agent confined and serving, parked until the start.
    pub fn with_early_init(mut self, disk_mb: u32, image: &str, held: Option<HeldInit>) -> Self {
        if self.warm.is_none() {
            // Another image's root is mounted by the start (its record may change
            // meanwhile; the built-in image's is this process's own).
            let root = (image == DEFAULT_IMAGE)
                .then(|| self.image_dirs(image))
                .and_then(|layers| layers.ok())
                .map(|layers| (image.to_owned(), layers));
            let (config, cgroups) = (self.config.clone(), self.cgroups.clone());
            let tethered = self.tethers.is_some();
            let began = warm::EarlyInit::begin(
                config,
                cgroups,
                self.slots.view(),
                (disk_mb, root),
                held,
                tethered,
            );
            self.early = match began {
                Ok(early) => Some(early),
                Err(e) => {
                    tracing::warn!(error = %e, "no early init");
                    None
                }
            };
        }
        self
    }

    /// Removes the init [`LinuxRuntime::with_early_init`] made if no start took it.
    pub fn discard_early_init(&self) {
        if let Some(early) = &self.early {
            early.discard();
        }
    }

    /// Keeps `count` sandbox inits started ahead of time (0 = none): a start takes one
    /// and skips the init's exec, its first cgroup move, its id maps and its disk's
    /// mount (and with [`LinuxRuntime::fill_warm_inits`] its root's mounts and network).
    /// Without that call they are filled after the first start, with its disk size.
    pub fn with_warm_inits(self, count: usize) -> Self {
        self.with_growing_warm_inits(count, count)
    }

    /// [`LinuxRuntime::with_warm_inits`] with `count` as the base size of a pool that
    /// grows by one, up to `max`, for each start finding it empty (a burst outrunning
    /// the refill), and shrinks back to `count` once starts stop missing for a while.
    pub fn with_growing_warm_inits(mut self, count: usize, max: usize) -> Self {
        let net = self.network.clone();
        let sizes = (count, max);
        self.warm = match count {
            0 => None,
            _ => match warm::WarmPool::new(
                self.config.clone(),
                self.cgroups.clone(),
                self.slots.view(),
                sizes,
                net,
            ) {
                Ok(pool) => Some(pool),
                Err(e) => {
                    tracing::warn!(error = %e, "no warm inits");
                    None
                }
            },
        };
        self.spare_nets = match (&self.network, count > 0) {
            (Some(net), true) => Some(net::spares::SpareNets::new(net.clone(), count)),
            _ => None,
        };
        self
    }

    /// Keeps no more warm inits (of any shape) than `max` less the sandboxes running on
    /// the data dir: a server's `max_sandboxes` (and memory budget) bound the pool too.
    pub fn cap_warm_inits(self, max: usize) -> Self {
        if let Some(pool) = &self.warm {
            pool.cap_at(max);
        }
        self
    }

    /// Keeps one warm init parked in the root of each of the last `count` images that
    /// starts used (other than the one [`LinuxRuntime::fill_warm_inits`] mounts; 0:
    /// none; 2 unless set). Needs warm inits.
    pub fn with_warm_images(self, count: usize) -> Self {
        if let Some(pool) = &self.warm {
            pool.keep_images(count);
        }
        self
    }

    /// The PID 1s of warm inits parked in image `name`'s root, ready to be taken.
    pub fn warm_inits_parked_in(&self, name: &str) -> Vec<i32> {
        self.warm
            .as_ref()
            .map_or(Vec::new(), |pool| pool.parked_in(name))
    }

    /// Starts filling the warm inits now, for sandboxes with a `disk_mb` MiB disk (the
    /// size most starts will ask for) and, with `egress` (and egress networking
    /// configured), an egress network without policy rules wired in already; keeps
    /// them so: without this call they follow the disk size of the last start and are
    /// not wired. Starts of another kind start cold.
    pub fn fill_warm_inits(&self, disk_mb: u32, egress: bool) {
        if let Some(pool) = &self.warm {
            // The default image's root is mounted ahead too (others are remounted).
            let root = match self.image_dirs(DEFAULT_IMAGE) {
                Ok(layers) => Some((DEFAULT_IMAGE.to_string(), layers)),
                Err(e) => {
                    tracing::warn!(error = %e, "warm inits without a root mounted ahead");
                    None
                }
            };
            pool.prefer(warm::Shape {
                disk_mb,
                wired: egress,
                root,
                policy: Default::default(),
            });
        }
        if let Some(spares) = &self.spare_nets {
            spares.refill();
        }
    }

    /// Grows the warm pool to `n` entries now (up to its max; none without warm inits),
    /// ahead of any burst: a server's first burst starts warm. It shrinks back to its
    /// base size like a pool a burst grew (at a start after quiet minutes).
    pub fn grow_warm_inits(&self, n: usize) {
        if let Some(pool) = &self.warm {
            pool.grow_to(n);
        }
    }

    /// Whether this runtime keeps warm inits.
    pub fn warm_inits_enabled(&self) -> bool {
        self.warm.is_some()
    }

    /// Whether the warm pool is refilling (making inits, or waiting to retry a failed
    /// make).
    pub fn warm_inits_refilling(&self) -> bool {
        self.warm.as_ref().is_some_and(|pool| pool.refilling())
    }

    /// Warm inits ready to be taken now.
    pub fn warm_inits_ready(&self) -> usize {
        self.warm.as_ref().map_or(0, |pool| pool.ready())
    }

    /// Warm inits of the default shape the pool aims to keep now (its base size, or
    /// more after starts found it empty).
    pub fn warm_inits_target(&self) -> usize {
        self.warm.as_ref().map_or(0, |pool| pool.target())
    }

    /// The most warm inits this runtime's refills have made at once so far (a refill
    /// overlaps its makes, within a fixed bound).
    pub fn warm_inits_making_peak(&self) -> usize {
        self.warm.as_ref().map_or(0, |pool| pool.making_peak())
    }

    /// Warm inits this runtime's refills began to make while a start was under way.
    pub fn warm_inits_made_beside_starts(&self) -> usize {
        self.warm
            .as_ref()
            .map_or(0, |pool| pool.made_beside_starts())
    }

    /// Wired warm inits made for the policy of a recent start, ready now.
    pub fn warm_inits_with_policy(&self) -> usize {
        self.warm
            .as_ref()
            .map_or(0, |pool| pool.ready_with_policy())
    }

    /// Warm inits ready now, of any shape (the one kept for other layer stacks too).
    pub fn warm_inits_held(&self) -> usize {
        self.warm.as_ref().map_or(0, |pool| pool.held())
    }

    /// Spare egress host sides ready to be taken now.
    pub fn spare_networks_ready(&self) -> usize {
        self.spare_nets.as_ref().map_or(0, |s| s.ready())
    }

    /// Ends the warm inits and removes what they made (dropping the runtime does too);
    /// started sandboxes are left alone.
    pub fn drain_warm_inits(&self) {
        if let Some(pool) = &self.warm {
            pool.drain();
        }
        if let Some(spares) = &self.spare_nets {
            spares.drain();
        }
        // An untaken early init's cgroups are in the parent too (a run that failed
        // before its start): removed first, or the parent would stay behind, empty.
        self.discard_early_init();
        // Sandboxes left running keep it (the rmdir of a parent in use fails).
        self.remove_cgroup_parent_if_made();
    }

    /// Removes the warm entries of the data dir whose owning process is gone, as every
    /// runtime does when it opens the data dir: for a process that keeps running beside
    /// others (a server), where a one-shot run killed with its early init made and not
    /// yet taken would otherwise keep that entry's mounted disk, loop device, cgroups
    /// and id slot until the next runtime opens the data dir.
    /// An entry dir still empty is left alone (for the next open's sweep): it may be a
    /// make of this process in its first instant, its owner mark not yet written (a
    /// run's own early init, made beside the run's sweep of earlier runs).
    pub fn sweep_dead_warm_entries(&self) {
        let empty = warm::EmptyDirs::Leave;
        warm::sweep_stale(&self.config.data_dir, &self.cgroups, &self.slots, empty);
    }

    /// Removes the parent cgroup if this runtime made it (or took it over from a maker
    /// that is gone: `parent_record`, at its open or now) and nothing is in it (as a
    /// drain does): for a one-shot process, whose runtime is not dropped at its end. A
    /// runtime that found the parent while its maker lived takes it over here if that
    /// maker has gone since (it stopped first, while this one's sandboxes kept the
    /// parent, and left it for good: two servers' tests at once left the default one).
    pub fn remove_cgroup_parent_if_made(&self) {
        let parent = &self.config.cgroup_parent;
        if self.made_cgroup_parent
            || parent_record::was_remade(parent)
            || parent_record::claim(Path::new(parent_record::HOST_DIR), parent, false)
        {
            self.cgroups.remove_parent_if_unused();
            parent_record::release(
                Path::new(parent_record::HOST_DIR),
                &self.config.cgroup_parent,
                self.cgroups.parent_gone(),
            );
        }
    }

    /// The cgroup hierarchy detected at start-up.
    pub fn cgroups(&self) -> &Cgroups {
        &self.cgroups
    }

    /// Handles of every started sandbox whose state dir is still on disk (each start
    /// writes `handle.json`): for re-adopting or cleaning up after a restart.
    pub fn stored_handles(&self) -> Vec<SandboxHandle> {
        let Ok(entries) = std::fs::read_dir(self.sandboxes_dir()) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| std::fs::read(e.ok()?.path().join("handle.json")).ok())
            .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
            .collect()
    }

    fn sandboxes_dir(&self) -> PathBuf {
        self.config.data_dir.join("sandboxes")
    }

    /// Host directories of a spec's layers, top first: snapshots over the image.
    /// Host directories of `spec`'s layers, top first, and their pin (to be written
    /// into the sandbox's state dir: until then no collection runs).
    fn layer_stack(
        &self,
        spec: &SandboxSpec,
    ) -> Result<(Vec<PathBuf>, layer_pins::LayerPin), RuntimeError> {
        let lock = layer_pins::share_gc_lock(&self.config.data_dir.join("layers"))?;
        let image = self.resolve_image(&spec.image)?;
        // A layer listed twice (an image may) is stacked once, where it is highest: the
        // overlay refuses one dir twice (ELOOP), and the one below adds nothing, every
        // path it has being the one above's.
        let mut seen = std::collections::HashSet::new();
        let mut digests = Vec::new();
        let mut dirs = Vec::new();
        for digest in spec
            .extra_layers
            .iter()
            .rev()
            .chain(image.layers.iter().rev())
        {
            let dir = self.layers.path(digest)?;
            if seen.insert(dir.clone()) {
                digests.push(digest.clone());
                dirs.push(dir);
            }
        }
        Ok((dirs, layer_pins::LayerPin::new(digests, lock)))
    }

    /// Layers that live sandboxes (their state dirs) use.
    pub fn pinned_layers(&self) -> std::collections::HashSet<String> {
        layer_pins::pinned_layers(&self.sandboxes_dir())
    }

    /// Whether image `name`'s root gets the host's /usr (the built-in image, and images
    /// built from it).
    pub(crate) fn wants_host_usr(&self, name: &str) -> bool {
        name == DEFAULT_IMAGE || self.resolve_image(name).is_ok_and(|i| i.host_usr)
    }

    /// Host directories of image `name`'s layers, top first.
    fn image_dirs(&self, name: &str) -> Result<Vec<PathBuf>, RuntimeError> {
        let image = self.resolve_image(name)?;
        image
            .layers
            .iter()
            .rev()
            .map(|d| self.layers.path(d))
            .collect()
    }
}

impl Drop for LinuxRuntime {
    /// Ends the warm inits and spare networks, and removes the parent cgroup this
    /// runtime made if nothing is left in it.
    fn drop(&mut self) {
        self.drain_warm_inits();
    }
}

impl Runtime for LinuxRuntime {
    fn name(&self) -> &'static str {
        "linux"
    }

    fn start(&self, spec: &SandboxSpec) -> Result<SandboxHandle, RuntimeError> {
        let _starting = self.warm.as_ref().map(|pool| pool.starting());
        start::start(self, spec)
    }

    fn start_with_network(
        &self,
        spec: &SandboxSpec,
        network: &crate::NetworkSpec,
    ) -> Result<SandboxHandle, RuntimeError> {
        let _starting = self.warm.as_ref().map(|pool| pool.starting());
        net::start(self, spec, network)
    }

    fn is_alive(&self, handle: &SandboxHandle) -> bool {
        sys::is_same_live_process(handle.agent_pid, handle.agent_start_ticks)
    }

    fn watch_exit(&self, handle: &SandboxHandle) -> ExitWatch {
        watch::watch_exit(handle)
    }

    fn freeze(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        crate::faults::check("freeze")?;
        self.cgroups.set_frozen(handle.id, true)
    }

    fn thaw(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        crate::faults::check("thaw")?;
        self.cgroups.set_frozen(handle.id, false)
    }

    fn is_frozen(&self, handle: &SandboxHandle) -> bool {
        self.cgroups.is_frozen(handle.id)
    }

    fn capture_layer(&self, handle: &SandboxHandle) -> Result<Layer, RuntimeError> {
        self.capture_layer_until(handle, &crate::Cancel::new())
    }

    fn capture_layer_until(
        &self,
        handle: &SandboxHandle,
        cancel: &crate::Cancel,
    ) -> Result<Layer, RuntimeError> {
        crate::faults::check("capture")?;
        cancel
            .check()
            .map_err(io("capturing a layer", &handle.state_dir))?;
        capture::capture(self, handle, cancel)
    }

    fn snapshot_bound(
        &self,
        handle: &SandboxHandle,
    ) -> Result<Option<crate::CaptureBound>, RuntimeError> {
        capture_bound::measure(handle).map(Some)
    }

    fn claim(&self, id: Uuid) -> Result<(), RuntimeError> {
        match &self.tethers {
            Some(tethers) => tethers.claim(id, &self.sandboxes_dir()),
            None => Ok(()),
        }
    }

    fn unclaim(&self, id: Uuid) {
        if let Some(tethers) = &self.tethers {
            tethers.unclaim(id);
        }
    }

    fn owned_elsewhere(&self, id: Uuid) -> bool {
        // This process's own marks are locked too (by another open file).
        !self.tethers.as_ref().is_some_and(|t| t.holds(id)) && self.run_holds(id)
    }

    fn destroy(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        // The network goes even when the rest could not (its link gone, nothing inside
        // reaches out any more): a destroy tried again finds no lease, and one never
        // tried again (its data dir removed by hand) leaves no network behind.
        // Its network namespace is held through the kill, so that once no process of it
        // is left its link is still there to tell whether it ever sent anything; let go
        // right then, the namespace and its link go while the rest is removed.
        let mut netns = net::hold_netns(self, handle);
        let mut quiet = false;
        let destroyed = destroy::destroy_noting(self, handle, || {
            let held = netns.take();
            quiet = held.is_some() && net::received_nothing(self, handle.id);
            drop(held);
        });
        drop(netns);
        let detached = net::detach(self, handle.id, quiet);
        destroyed?;
        detached?;
        if let Some(tethers) = &self.tethers {
            tethers.release(handle.id);
        }
        Ok(())
    }

    fn reconcile(&self, keep: &HashSet<Uuid>, ended: &HashSet<Uuid>) -> Vec<Uuid> {
        reconcile::reconcile(self, keep, ended)
    }

    fn usage(&self, handle: &SandboxHandle) -> Result<ResourceUsage, RuntimeError> {
        usage::measure(&self.cgroups, handle)
    }

    fn warm_pool(&self) -> Option<crate::WarmPoolStats> {
        let pool = self.warm.as_ref()?;
        let (hits, misses) = self.warm_counts.get();
        Some(crate::WarmPoolStats {
            ready: pool.ready() as u64,
            hits,
            misses,
            target: pool.target() as u64,
        })
    }

    fn resolve_image(&self, name: &str) -> Result<ImageLayers, RuntimeError> {
        let _guard = self.image_lock.lock().unwrap_or_else(|p| p.into_inner());
        images::resolve(&self.config.data_dir, &self.layers, name)
    }

    fn read_image_file(
        &self,
        layers: &[String],
        path: &str,
        max: u64,
    ) -> Result<crate::ImageFile, RuntimeError> {
        image_files::read_file(&self.layers, layers, path, max)
    }

    fn delete_layer(&self, digest: &str) -> Result<(), RuntimeError> {
        self.layers.delete(digest)
    }

    fn apply_requests(
        &self,
        handle: &SandboxHandle,
        requests: &crate::Requests,
    ) -> Result<Vec<u32>, RuntimeError> {
        requests::apply(&self.cgroups, handle.id, requests)
    }

    fn free_cpus(&self) -> Option<Vec<u32>> {
        requests::free_cpus(&self.cgroups)
    }

    fn disk_space(&self) -> Result<Option<DiskSpace>, RuntimeError> {
        disk_space::measure(&self.config.data_dir).map(Some)
    }
}

/// Maps an I/O error to `RuntimeError::Io` with what was being done and where.
fn io<'a>(
    what: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(std::io::Error) -> RuntimeError + 'a {
    move |source| RuntimeError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}
