//! Runtime backends: the `Runtime` trait the engine drives, and the backends that
//! implement it with kernel isolation (Linux-native namespaces + overlayfs + cgroups).

pub mod cancel;
pub mod error;
pub mod faults;
pub mod isolation;
pub mod network;
pub mod spec;
pub mod tiers;

pub use cancel::Cancel;
pub use error::RuntimeError;
pub use isolation::{Isolation, UnknownIsolation};
pub use network::*;
pub use spec::*;

/// What [`Runtime::watch_exit`] gives.
#[derive(Debug)]
pub enum ExitWatch {
    /// Becomes readable (poll/epoll) once the agent has exited.
    Readable(std::os::fd::OwnedFd),
    /// The agent has exited already.
    Exited,
    /// The backend cannot watch its agents.
    Unsupported,
}

/// A backend that makes, freezes, captures and destroys sandboxes.
///
/// Every method is blocking (the engine calls them from `spawn_blocking`). A
/// [`SandboxHandle`] is plain data: the engine persists it and passes it back after a
/// restart, so every method must work from a handle alone (no in-memory state needed).
pub trait Runtime: Send + Sync + 'static {
    /// Short backend name, e.g. `"linux"`.
    fn name(&self) -> &'static str;

    /// Whether sandboxes of tier `isolation` can start here; why not otherwise (a
    /// backend runs the container tier unless it says more).
    fn offers(&self, isolation: Isolation) -> Result<(), RuntimeError> {
        match isolation {
            Isolation::Container => Ok(()),
            other => Err(RuntimeError::Unsupported(format!(
                "the {} backend has no {other} tier",
                self.name()
            ))),
        }
    }

    /// Creates and starts a sandbox whose PID 1 is the agent, and returns once the
    /// agent's socket accepts connections. On error, everything made so far is removed.
    fn start(&self, spec: &SandboxSpec) -> Result<SandboxHandle, RuntimeError>;

    /// Like [`Runtime::start`], with a network: `start` gives a sandbox only `lo`; this
    /// may give it egress under `network`'s policy layers. Backends without networking
    /// start `NetworkMode::None` sandboxes and refuse egress.
    fn start_with_network(
        &self,
        spec: &SandboxSpec,
        network: &NetworkSpec,
    ) -> Result<SandboxHandle, RuntimeError> {
        match network.mode {
            NetworkMode::None => self.start(spec),
            NetworkMode::Egress => Err(RuntimeError::Unsupported(format!(
                "the {} backend has no egress networking",
                self.name()
            ))),
        }
    }

    /// Called by the engine just before it records sandbox `id` (any tier), on its
    /// async task (so cheap: a few file system calls at most). A backend that ties
    /// sandboxes to the process starting them makes the owner mark here, so that a
    /// process killed right after the record is written leaves a mark the next sweep
    /// ends the record by (see `linux::tether`). An error refuses the create.
    fn claim(&self, id: uuid::Uuid) -> Result<(), RuntimeError> {
        let _ = id;
        Ok(())
    }

    /// Gives back [`Runtime::claim`]'s mark of sandbox `id` when its start failed
    /// before it used it (the record is ended, nothing of it is on the host).
    fn unclaim(&self, id: uuid::Uuid) {
        let _ = id;
    }

    /// Whether another live process owns sandbox `id` (a `sandboxd run` beside this
    /// one on the data dir, holding its owner mark): such a sandbox is that process's
    /// to start and end; this one never settles, expires or tears it down. `false` for
    /// this process's own sandboxes, untethered ones (a server's), and those whose
    /// owner died (the killed-run sweep's). Cheap (an open and a `flock` at most).
    fn owned_elsewhere(&self, id: uuid::Uuid) -> bool {
        let _ = id;
        false
    }

    /// Whether the sandbox described by `handle` is still alive (agent running).
    fn is_alive(&self, handle: &SandboxHandle) -> bool;

    /// How the caller can learn that the sandbox's agent exited: on Linux a pidfd, which
    /// becomes readable then. Backends that cannot tell answer `Unsupported`, and a dead
    /// agent is then noticed only when it is next used.
    fn watch_exit(&self, handle: &SandboxHandle) -> ExitWatch {
        let _ = handle;
        ExitWatch::Unsupported
    }

    /// Freezes every process of the sandbox (cgroup freezer); memory stays resident.
    fn freeze(&self, handle: &SandboxHandle) -> Result<(), RuntimeError>;

    /// Thaws a frozen sandbox.
    fn thaw(&self, handle: &SandboxHandle) -> Result<(), RuntimeError>;

    /// Whether the sandbox is frozen in memory ([`Runtime::freeze`], or a snapshot's
    /// capture that a kill interrupted); on disk is not frozen.
    fn is_frozen(&self, handle: &SandboxHandle) -> bool {
        let _ = handle;
        false
    }

    /// Whether [`Runtime::checkpoint`] can write this sandbox's memory to disk here.
    fn can_checkpoint(&self, _handle: &SandboxHandle) -> bool {
        false
    }

    /// Whether the sandbox is paused to disk (see [`Runtime::checkpoint`]).
    fn is_checkpointed(&self, handle: &SandboxHandle) -> bool {
        let _ = handle;
        false
    }

    /// Pauses the sandbox to disk: writes its memory (every process and its state) to
    /// an image and ends its host processes, freeing their memory; returns the handle
    /// of the sandbox on disk (persist it). A sandbox that cannot be checkpointed keeps
    /// running as it was ([`RuntimeError::CannotCheckpoint`]).
    fn checkpoint(&self, handle: &SandboxHandle) -> Result<SandboxHandle, RuntimeError> {
        let _ = handle;
        Err(RuntimeError::CannotCheckpoint(format!(
            "the {} backend keeps no memory images (pause keeps memory resident)",
            self.name()
        )))
    }

    /// Starts a sandbox paused to disk again from its image, every process where it
    /// was; returns its running handle (persist it). Running sandboxes are unchanged.
    fn restore(&self, handle: &SandboxHandle) -> Result<SandboxHandle, RuntimeError> {
        Ok(handle.clone())
    }

    /// At start-up, for a handle the server recorded: the sandbox's running handle when
    /// a restore (or a memory snapshot's checkpoint and restore) finished after that
    /// record and the server was killed before recording its result, or `None`. What
    /// the restore had left (its image) is removed.
    fn restored(&self, handle: &SandboxHandle) -> Option<SandboxHandle> {
        let _ = handle;
        None
    }

    /// Whether [`Runtime::snapshot_memory`] can keep this sandbox's memory (backends
    /// without memory images, or a sandbox the backend cannot checkpoint, do not).
    fn can_snapshot_memory(&self, handle: &SandboxHandle) -> bool {
        let _ = handle;
        false
    }

    /// Takes the sandbox's memory and filesystem together (consistent: nothing runs
    /// between the two) as snapshot `id`, whose image the backend keeps until
    /// [`Runtime::delete_memory_snapshot`]; the sandbox goes on as it was (running,
    /// frozen or on disk). Returns the snapshot (or why not) and the sandbox's handle
    /// now, in either case (persist it: its host processes may have changed; when it
    /// could not be brought back it is on disk, [`Runtime::is_checkpointed`]).
    fn snapshot_memory(
        &self,
        handle: &SandboxHandle,
        id: uuid::Uuid,
    ) -> (Result<MemorySnapshot, RuntimeError>, SandboxHandle) {
        let _ = id;
        let err = RuntimeError::Unsupported(format!(
            "the {} backend keeps no memory images",
            self.name()
        ));
        (Err(err), handle.clone())
    }

    /// Removes the memory snapshot images this backend holds that are not in `keep`
    /// (left by a crash between taking one and recording it); returns those removed.
    fn sweep_memory_snapshots(
        &self,
        keep: &std::collections::HashSet<std::path::PathBuf>,
    ) -> Vec<std::path::PathBuf> {
        let _ = keep;
        Vec::new()
    }

    /// Starts a sandbox from a memory snapshot's `image`: the processes of the sandbox
    /// it was taken from run on in this one (a fork), over `spec`'s image with the
    /// snapshot's layer last in `extra_layers`, under a fresh writable layer, with
    /// `spec`'s hostname and a network of its own as `network` says (with egress its
    /// own link, address and rules, which the restored processes' sockets then use).
    fn start_from_memory(
        &self,
        spec: &SandboxSpec,
        network: &NetworkSpec,
        image: &std::path::Path,
    ) -> Result<SandboxHandle, RuntimeError> {
        let _ = (spec, network, image);
        Err(RuntimeError::Unsupported(format!(
            "the {} backend keeps no memory images",
            self.name()
        )))
    }

    /// Removes a memory snapshot's image (idempotent).
    fn delete_memory_snapshot(&self, image: &std::path::Path) -> Result<(), RuntimeError> {
        let _ = image;
        Ok(())
    }

    /// Captures the sandbox's writable filesystem layer as a content-addressed layer in
    /// the layer store and returns it. The sandbox keeps running.
    fn capture_layer(&self, handle: &SandboxHandle) -> Result<Layer, RuntimeError>;

    /// [`Runtime::capture_layer`], stopping (and leaving nothing behind) once `cancel`
    /// is set: the caller no longer waits. The default cannot stop.
    fn capture_layer_until(
        &self,
        handle: &SandboxHandle,
        cancel: &Cancel,
    ) -> Result<Layer, RuntimeError> {
        let _ = cancel;
        self.capture_layer(handle)
    }

    /// The most a capture of this sandbox's writable layer would store now (the bytes
    /// its files occupy, the entries it holds); `None` when the backend keeps no layers
    /// on the data dir's filesystem (nothing for disk admission to account). Exact only
    /// while nothing in the sandbox writes (the caller freezes it first).
    fn snapshot_bound(&self, handle: &SandboxHandle) -> Result<Option<CaptureBound>, RuntimeError> {
        let _ = handle;
        Ok(None)
    }

    /// Kills every process and removes every mount, cgroup and directory the sandbox
    /// had. Idempotent: destroying an already-destroyed sandbox succeeds.
    fn destroy(&self, handle: &SandboxHandle) -> Result<(), RuntimeError>;

    /// At start-up, before any sandbox is started: removes everything the backend holds
    /// for sandboxes not in `keep` (the ones with a live record), e.g. what a start
    /// interrupted by a crash left, including what it holds for the `ended` ones (whose
    /// records were just ended) by their id alone; returns the ids removed.
    fn reconcile(
        &self,
        keep: &std::collections::HashSet<uuid::Uuid>,
        ended: &std::collections::HashSet<uuid::Uuid>,
    ) -> Vec<uuid::Uuid> {
        let _ = (keep, ended);
        Vec::new()
    }

    /// Current resource usage, as far as the backend can tell.
    fn usage(&self, handle: &SandboxHandle) -> Result<ResourceUsage, RuntimeError>;

    /// Resolves an image name (e.g. `"default"`) into its layer stack, building the
    /// built-in images on first use.
    fn resolve_image(&self, name: &str) -> Result<ImageLayers, RuntimeError>;

    /// File `path` of the root made of stored `layers` (lowest first), at most `max`
    /// bytes, read on the host without following symlinks. Backends without a layer
    /// store answer `Absent`.
    fn read_image_file(
        &self,
        layers: &[String],
        path: &str,
        max: u64,
    ) -> Result<ImageFile, RuntimeError> {
        let _ = (layers, path, max);
        Ok(ImageFile::Absent)
    }

    /// Removes a stored layer that no image or snapshot refers to any more.
    fn delete_layer(&self, digest: &str) -> Result<(), RuntimeError>;

    /// Applies soft guarantees (and, when asked, dedicated CPUs) to a started sandbox;
    /// returns the CPUs it was pinned to. Backends without them accept and ignore
    /// guarantees, and refuse pinning as unsupported.
    fn apply_requests(
        &self,
        handle: &SandboxHandle,
        requests: &Requests,
    ) -> Result<Vec<u32>, RuntimeError> {
        let _ = handle;
        match requests.pinned_vcpus {
            Some(_) => Err(RuntimeError::Unsupported(format!(
                "the {} backend cannot pin CPUs",
                self.name()
            ))),
            None => Ok(Vec::new()),
        }
    }

    /// The warm-init pool's size and hit counts; `None` when the backend keeps none.
    fn warm_pool(&self) -> Option<WarmPoolStats> {
        None
    }

    /// [`Runtime::warm_pool`] by the tier whose sandboxes each pool starts (a backend
    /// of both tiers keeps one per tier); the default names the container tier.
    fn warm_pools(&self) -> Vec<(Isolation, WarmPoolStats)> {
        self.warm_pool()
            .map(|p| (Isolation::Container, p))
            .into_iter()
            .collect()
    }

    /// Host CPUs no pinned sandbox holds; `None` when the backend cannot pin.
    fn free_cpus(&self) -> Option<Vec<u32>> {
        None
    }

    /// Whether sandboxes of tier `isolation` can be pinned to dedicated CPUs here (a
    /// backend that offers the tier and can pin).
    fn can_pin(&self, isolation: Isolation) -> bool {
        self.offers(isolation).is_ok() && self.free_cpus().is_some()
    }

    /// Room for sandboxes' size-limited writable layers; `None` when the backend keeps
    /// no such layers on a filesystem of its own (nothing for admission to account).
    fn disk_space(&self) -> Result<Option<DiskSpace>, RuntimeError> {
        Ok(None)
    }
}

#[cfg(feature = "linux")]
pub mod linux;
