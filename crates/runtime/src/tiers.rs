//! One [`Runtime`] over both tiers: starts each sandbox on the backend of its spec's
//! tier and sends every operation on a handle to the backend of the tier recorded in
//! it, so the engine keeps one runtime while a server runs containers and gVisor
//! sandboxes side by side. A new backend stays a backend of its own, added here.
//!
//! Both backends share the data dir's layer store, images and disk (the gVisor
//! backend builds on the container one), so image, layer and disk calls go to the
//! container backend, as do CPU pinning's free CPUs; the warm pools' figures are
//! both backends' (each keeps a pool of its own).

use crate::{
    DiskSpace, ExitWatch, ImageFile, ImageLayers, Isolation, Layer, MemorySnapshot, NetworkSpec,
    Requests, ResourceUsage, Runtime, RuntimeError, SandboxHandle, SandboxSpec, WarmPoolStats,
};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use uuid::Uuid;

/// Opens the gVisor backend, or says why it cannot.
pub type GvisorOpener = Box<dyn FnOnce() -> Result<Arc<dyn Runtime>, String> + Send>;

/// The container backend, and the gVisor one when it could be opened.
pub struct Tiers {
    container: Arc<dyn Runtime>,
    /// The gVisor backend, or why this server has none (e.g. `runsc` is missing);
    /// unset until first needed when opened lazily.
    gvisor: OnceLock<Result<Arc<dyn Runtime>, String>>,
    /// Opens it on first use ([`Tiers::lazy`]).
    open_gvisor: Mutex<Option<GvisorOpener>>,
}

impl Tiers {
    /// Both tiers; `gvisor` is the gVisor backend or why there is none.
    pub fn new(container: Arc<dyn Runtime>, gvisor: Result<Arc<dyn Runtime>, String>) -> Self {
        Tiers {
            container,
            gvisor: OnceLock::from(gvisor),
            open_gvisor: Mutex::new(None),
        }
    }

    /// Both tiers, the gVisor one opened by `open` when a sandbox first needs it (for
    /// short-lived processes, which mostly need one tier). [`Runtime::reconcile`] only
    /// covers it once it is open.
    pub fn lazy(container: Arc<dyn Runtime>, open: GvisorOpener) -> Self {
        Tiers {
            container,
            gvisor: OnceLock::new(),
            open_gvisor: Mutex::new(Some(open)),
        }
    }

    /// The gVisor backend (opening it if it is opened lazily), or why there is none.
    fn gvisor(&self) -> &Result<Arc<dyn Runtime>, String> {
        self.gvisor.get_or_init(|| {
            let open = self
                .open_gvisor
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            match open {
                Some(open) => open(),
                None => Err("this server has no gVisor backend".into()),
            }
        })
    }

    /// The backend of tier `isolation`, or why this server has none.
    fn backend(&self, isolation: Isolation) -> Result<&dyn Runtime, RuntimeError> {
        match isolation {
            Isolation::Container => Ok(self.container.as_ref()),
            Isolation::Gvisor => match self.gvisor() {
                Ok(gvisor) => Ok(gvisor.as_ref()),
                Err(why) => Err(RuntimeError::Unsupported(why.clone())),
            },
        }
    }

    /// The backend that started `handle`.
    fn of(&self, handle: &SandboxHandle) -> Result<&dyn Runtime, RuntimeError> {
        self.backend(handle.isolation)
    }
}

/// Whether `handle` is a gVisor sandbox whose memory is on disk (paused there, or moved
/// there by autoPause), seen while its backend is unavailable: it is kept as it is, never
/// ended as crashed, so that it resumes once runsc is back.
fn on_disk_without_backend(handle: &SandboxHandle) -> bool {
    #[cfg(feature = "linux")]
    {
        handle.isolation == Isolation::Gvisor && crate::linux::gvisor::checkpoint::on_disk(handle)
    }
    #[cfg(not(feature = "linux"))]
    {
        let _ = handle;
        false
    }
}

impl Runtime for Tiers {
    fn name(&self) -> &'static str {
        "tiers"
    }

    fn offers(&self, isolation: Isolation) -> Result<(), RuntimeError> {
        self.backend(isolation)?.offers(isolation)
    }

    fn start(&self, spec: &SandboxSpec) -> Result<SandboxHandle, RuntimeError> {
        self.backend(spec.isolation)?.start(spec)
    }

    fn start_with_network(
        &self,
        spec: &SandboxSpec,
        network: &NetworkSpec,
    ) -> Result<SandboxHandle, RuntimeError> {
        self.backend(spec.isolation)?
            .start_with_network(spec, network)
    }

    /// Both tiers' sandboxes share the container backend's marks (one data dir).
    fn claim(&self, id: Uuid) -> Result<(), RuntimeError> {
        self.container.claim(id)
    }

    fn unclaim(&self, id: Uuid) {
        self.container.unclaim(id)
    }

    fn owned_elsewhere(&self, id: Uuid) -> bool {
        self.container.owned_elsewhere(id)
    }

    fn is_alive(&self, handle: &SandboxHandle) -> bool {
        // Without its backend (runsc removed since), a sandbox whose agent runs is
        // still alive: it is kept, and operations on it say why they cannot run.
        // One whose memory is on disk is kept too (paused, until runsc is back).
        match self.of(handle) {
            Ok(rt) => rt.is_alive(handle),
            Err(_) => self.container.is_alive(handle) || on_disk_without_backend(handle),
        }
    }

    fn watch_exit(&self, handle: &SandboxHandle) -> ExitWatch {
        match self.of(handle) {
            Ok(rt) => rt.watch_exit(handle),
            Err(_) => ExitWatch::Unsupported,
        }
    }

    fn freeze(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        self.of(handle)?.freeze(handle)
    }

    fn thaw(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        self.of(handle)?.thaw(handle)
    }

    fn is_frozen(&self, handle: &SandboxHandle) -> bool {
        self.of(handle).is_ok_and(|rt| rt.is_frozen(handle))
    }

    fn can_checkpoint(&self, handle: &SandboxHandle) -> bool {
        self.of(handle).is_ok_and(|rt| rt.can_checkpoint(handle))
    }

    fn is_checkpointed(&self, handle: &SandboxHandle) -> bool {
        match self.of(handle) {
            Ok(rt) => rt.is_checkpointed(handle),
            Err(_) => on_disk_without_backend(handle),
        }
    }

    fn checkpoint(&self, handle: &SandboxHandle) -> Result<SandboxHandle, RuntimeError> {
        self.of(handle)?.checkpoint(handle)
    }

    fn restore(&self, handle: &SandboxHandle) -> Result<SandboxHandle, RuntimeError> {
        self.of(handle)?.restore(handle)
    }

    fn restored(&self, handle: &SandboxHandle) -> Option<SandboxHandle> {
        self.of(handle).ok()?.restored(handle)
    }

    fn can_snapshot_memory(&self, handle: &SandboxHandle) -> bool {
        self.of(handle)
            .is_ok_and(|rt| rt.can_snapshot_memory(handle))
    }

    fn snapshot_memory(
        &self,
        handle: &SandboxHandle,
        id: Uuid,
    ) -> (Result<MemorySnapshot, RuntimeError>, SandboxHandle) {
        match self.of(handle) {
            Ok(rt) => rt.snapshot_memory(handle, id),
            Err(e) => (Err(e), handle.clone()),
        }
    }

    fn start_from_memory(
        &self,
        spec: &SandboxSpec,
        network: &NetworkSpec,
        image: &std::path::Path,
    ) -> Result<SandboxHandle, RuntimeError> {
        // Memory images are gVisor's alone: a fork runs where its image was taken.
        self.backend(Isolation::Gvisor)?
            .start_from_memory(spec, network, image)
    }

    fn delete_memory_snapshot(&self, image: &std::path::Path) -> Result<(), RuntimeError> {
        match self.backend(Isolation::Gvisor) {
            Ok(rt) => rt.delete_memory_snapshot(image),
            // Without runsc the image is plain files; remove them all the same.
            Err(_) => match std::fs::remove_dir_all(image) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RuntimeError::Io {
                    what: "removing a memory snapshot",
                    path: image.to_path_buf(),
                    source: e,
                }),
                _ => Ok(()),
            },
        }
    }

    fn sweep_memory_snapshots(
        &self,
        keep: &HashSet<std::path::PathBuf>,
    ) -> Vec<std::path::PathBuf> {
        // Without runsc the images wait (a later server with it sweeps them).
        match self.gvisor.get() {
            Some(Ok(gvisor)) => gvisor.sweep_memory_snapshots(keep),
            _ => Vec::new(),
        }
    }

    fn capture_layer(&self, handle: &SandboxHandle) -> Result<Layer, RuntimeError> {
        self.of(handle)?.capture_layer(handle)
    }

    fn capture_layer_until(
        &self,
        handle: &SandboxHandle,
        cancel: &crate::Cancel,
    ) -> Result<Layer, RuntimeError> {
        self.of(handle)?.capture_layer_until(handle, cancel)
    }

    fn snapshot_bound(
        &self,
        handle: &SandboxHandle,
    ) -> Result<Option<crate::CaptureBound>, RuntimeError> {
        self.of(handle)?.snapshot_bound(handle)
    }

    fn destroy(&self, handle: &SandboxHandle) -> Result<(), RuntimeError> {
        // Without its backend, the container one removes what it can (processes by
        // their cgroup, mounts, dirs, network).
        match self.of(handle) {
            Ok(rt) => rt.destroy(handle),
            Err(_) => self.container.destroy(handle),
        }
    }

    fn reconcile(&self, keep: &HashSet<Uuid>, ended: &HashSet<Uuid>) -> Vec<Uuid> {
        // gVisor first: it removes runsc's state too, then (over the same data dir) the
        // dirs, which the container backend then finds gone.
        let mut removed = match self.gvisor.get() {
            Some(Ok(gvisor)) => gvisor.reconcile(keep, ended),
            _ => Vec::new(),
        };
        for id in self.container.reconcile(keep, ended) {
            if !removed.contains(&id) {
                removed.push(id);
            }
        }
        removed
    }

    fn usage(&self, handle: &SandboxHandle) -> Result<ResourceUsage, RuntimeError> {
        self.of(handle)?.usage(handle)
    }

    fn resolve_image(&self, name: &str) -> Result<ImageLayers, RuntimeError> {
        self.container.resolve_image(name)
    }

    fn read_image_file(
        &self,
        layers: &[String],
        path: &str,
        max: u64,
    ) -> Result<ImageFile, RuntimeError> {
        self.container.read_image_file(layers, path, max)
    }

    fn delete_layer(&self, digest: &str) -> Result<(), RuntimeError> {
        self.container.delete_layer(digest)
    }

    fn apply_requests(
        &self,
        handle: &SandboxHandle,
        requests: &Requests,
    ) -> Result<Vec<u32>, RuntimeError> {
        self.of(handle)?.apply_requests(handle, requests)
    }

    fn warm_pool(&self) -> Option<WarmPoolStats> {
        // Both pools summed (the gVisor one only once open: asking never opens it).
        let pools = self.warm_pools();
        (!pools.is_empty()).then(|| {
            pools
                .iter()
                .fold(WarmPoolStats::default(), |sum, (_, p)| WarmPoolStats {
                    ready: sum.ready + p.ready,
                    hits: sum.hits + p.hits,
                    misses: sum.misses + p.misses,
                    target: sum.target + p.target,
                })
        })
    }

    fn warm_pools(&self) -> Vec<(Isolation, WarmPoolStats)> {
        let mut pools = self.container.warm_pools();
        if let Some(Ok(gvisor)) = self.gvisor.get() {
            pools.extend(gvisor.warm_pools());
        }
        pools
    }

    fn free_cpus(&self) -> Option<Vec<u32>> {
        self.container.free_cpus()
    }

    fn can_pin(&self, isolation: Isolation) -> bool {
        // The free CPUs are the host's, but whether a tier pins is its backend's say;
        // gVisor never does (not even asked: its backend may not be open).
        match isolation {
            Isolation::Gvisor => false,
            Isolation::Container => self
                .backend(isolation)
                .is_ok_and(|rt| rt.can_pin(isolation)),
        }
    }

    fn disk_space(&self) -> Result<Option<DiskSpace>, RuntimeError> {
        self.container.disk_space()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A backend that records which operations reached it and starts handles of `tier`.
    struct Fake {
        tier: Isolation,
        calls: Mutex<Vec<&'static str>>,
    }

    /// What each fake's warm pool says: told apart by tier.
    fn pool_of(tier: Isolation) -> WarmPoolStats {
        let n = match tier {
            Isolation::Container => 1,
            Isolation::Gvisor => 10,
        };
        WarmPoolStats {
            ready: n,
            hits: 2 * n,
            misses: 3 * n,
            target: 4 * n,
        }
    }

    impl Fake {
        fn new(tier: Isolation) -> Arc<Fake> {
            Arc::new(Fake {
                tier,
                calls: Mutex::new(Vec::new()),
            })
        }
        fn calls(&self) -> Vec<&'static str> {
            self.calls.lock().unwrap().clone()
        }
        fn note(&self, what: &'static str) {
            self.calls.lock().unwrap().push(what);
        }
    }

    impl Runtime for Fake {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn offers(&self, isolation: Isolation) -> Result<(), RuntimeError> {
            match isolation == self.tier {
                true => Ok(()),
                false => Err(RuntimeError::Unsupported("not mine".into())),
            }
        }
        fn start(&self, spec: &SandboxSpec) -> Result<SandboxHandle, RuntimeError> {
            self.note("start");
            Ok(SandboxHandle {
                id: spec.id,
                agent_pid: 0,
                agent_start_ticks: 0,
                agent_socket: Default::default(),
                state_dir: Default::default(),
                host_id_base: 0,
                warm: false,
                isolation: self.tier,
            })
        }
        fn is_alive(&self, _: &SandboxHandle) -> bool {
            self.note("is_alive");
            true
        }
        fn freeze(&self, _: &SandboxHandle) -> Result<(), RuntimeError> {
            self.note("freeze");
            Ok(())
        }
        fn thaw(&self, _: &SandboxHandle) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn capture_layer(&self, _: &SandboxHandle) -> Result<Layer, RuntimeError> {
            Err(RuntimeError::Unsupported("no".into()))
        }
        fn destroy(&self, _: &SandboxHandle) -> Result<(), RuntimeError> {
            self.note("destroy");
            Ok(())
        }
        fn reconcile(&self, _: &HashSet<Uuid>, _: &HashSet<Uuid>) -> Vec<Uuid> {
            self.note("reconcile");
            vec![Uuid::nil()]
        }
        fn usage(&self, _: &SandboxHandle) -> Result<ResourceUsage, RuntimeError> {
            Ok(Default::default())
        }
        fn resolve_image(&self, _: &str) -> Result<ImageLayers, RuntimeError> {
            self.note("resolve_image");
            Ok(Default::default())
        }
        fn delete_layer(&self, _: &str) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn warm_pool(&self) -> Option<WarmPoolStats> {
            Some(pool_of(self.tier))
        }
        fn warm_pools(&self) -> Vec<(Isolation, WarmPoolStats)> {
            vec![(self.tier, pool_of(self.tier))]
        }
    }

    #[test]
    fn warm_pool_figures_are_both_tiers_and_a_lazy_gvisor_is_not_opened_for_them() {
        let (c, g) = (
            Fake::new(Isolation::Container),
            Fake::new(Isolation::Gvisor),
        );
        let tiers = Tiers::new(c.clone(), Ok(g.clone() as Arc<dyn Runtime>));
        assert_eq!(
            tiers.warm_pools(),
            [
                (Isolation::Container, pool_of(Isolation::Container)),
                (Isolation::Gvisor, pool_of(Isolation::Gvisor)),
            ]
        );
        let sum = tiers.warm_pool().expect("pools");
        assert_eq!(
            (sum.ready, sum.hits, sum.misses, sum.target),
            (11, 22, 33, 44)
        );

        let opened = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = opened.clone();
        let lazy = Tiers::lazy(
            c.clone(),
            Box::new(move || {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(g as Arc<dyn Runtime>)
            }),
        );
        assert_eq!(lazy.warm_pool(), Some(pool_of(Isolation::Container)));
        assert!(!opened.load(std::sync::atomic::Ordering::SeqCst));
    }

    fn spec(isolation: Isolation) -> SandboxSpec {
        SandboxSpec {
            id: Uuid::new_v4(),
            image: "default".into(),
            extra_layers: Vec::new(),
            hostname: "h".into(),
            vcpu: 1,
            memory_mb: 64,
            pids_max: 64,
            disk_mb: 0,
            isolation,
        }
    }

    #[test]
    fn starts_go_by_the_spec_and_operations_by_the_handle() {
        let (c, g) = (
            Fake::new(Isolation::Container),
            Fake::new(Isolation::Gvisor),
        );
        let tiers = Tiers::new(c.clone(), Ok(g.clone() as Arc<dyn Runtime>));
        let on_g = tiers.start(&spec(Isolation::Gvisor)).expect("gvisor start");
        let on_c = tiers
            .start(&spec(Isolation::Container))
            .expect("container start");
        assert_eq!(
            (on_g.isolation, on_c.isolation),
            (Isolation::Gvisor, Isolation::Container)
        );
        tiers.freeze(&on_g).expect("freeze");
        tiers.destroy(&on_c).expect("destroy");
        tiers.resolve_image("default").expect("image");
        assert_eq!(g.calls(), ["start", "freeze"]);
        assert_eq!(c.calls(), ["start", "destroy", "resolve_image"]);
        assert_eq!(
            tiers.reconcile(&HashSet::new(), &HashSet::new()),
            [Uuid::nil()]
        );
        assert!(
            tiers.offers(Isolation::Gvisor).is_ok() && tiers.offers(Isolation::Container).is_ok()
        );
    }

    #[test]
    fn without_gvisor_its_requests_say_why_and_nothing_runs_as_a_container() {
        let c = Fake::new(Isolation::Container);
        let tiers = Tiers::lazy(c.clone(), Box::new(|| Err("runsc is missing".to_owned())));
        let err = tiers
            .start(&spec(Isolation::Gvisor))
            .expect_err("no gVisor");
        assert!(err.to_string().contains("runsc is missing"), "{err}");
        assert!(tiers.offers(Isolation::Gvisor).is_err());
        assert!(
            c.calls().is_empty(),
            "the container backend started it: {:?}",
            c.calls()
        );
        // A gVisor sandbox left from before is still seen alive and removed as far as
        // the container backend can; other operations are refused with the reason.
        let mut old = tiers.start(&spec(Isolation::Container)).expect("start");
        old.isolation = Isolation::Gvisor;
        assert!(tiers.freeze(&old).is_err());
        assert!(tiers.is_alive(&old));
        tiers.destroy(&old).expect("destroy");
        assert_eq!(c.calls(), ["start", "is_alive", "destroy"]);
    }
}
