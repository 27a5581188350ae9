//! Fault injection points for tests: with the `failpoints` feature (never in release
//! builds) a test makes a named step fail (`fail::cfg(name, "return")`) or hang
//! (`"sleep(ms)"`, `"pause"`) through the `fail` crate; without it every point is
//! nothing at all. A `sandboxd run` configures them from `SANDBOXD_FAILPOINTS`
//! ([`from_env`]).
//!
//! The points, in the order a sandbox meets them:
//! - `held.fork`: a `sandboxd run` about to fork its held init spawns it instead (as
//!   when it has threads or no `PR_SET_MM_MAP`);
//! - `held.fork_child`: a forked held init, its descriptors, signals, environment and
//!   command line made, ends at once (as when one of those steps fails);
//! - `run.held`: a `sandboxd run` spawned its held init, before anything else (a
//!   `"sleep(ms)"` there holds the run with the init unbegun);
//! - `run.opened`: a `sandboxd run` opened its backend (its early init is being made),
//!   before its async runtime and its signal handlers;
//! - `start.cgroup`: its cgroups made (cold start);
//! - `start.warm_dir`: a warm entry's dir renamed the sandbox's, its cgroups not yet
//!   (a `"sleep(ms)"` there lets a test kill the process between the two);
//! - `start.self_move`: the init's own move into its cgroups (v1, between its fork and
//!   its exec, or a held init's after its `begin`) fails in the child: its `tasks`
//!   files are opened read-only (cold start and warm entries);
//! - `start.disk`: its state dirs made and its disk mounted (cold start);
//! - `start.netns_open`: the open of the init's network namespace, to tell it to the
//!   network set up beside the start, fails (cold start);
//! - `warm.parking`, `warm.park`: a warm entry's (or an early init's) root mounted,
//!   before its park (`warm.parking` to hang there, `warm.park` to fail);
//! - `start.mount_root`: its root mounted through the user namespace;
//! - `start.handshake`: PID 1 attached, before its `Ready`;
//! - `start.pin`: the sandbox's layer pin about to be written (a warm start: into the
//!   entry's dir before its rename);
//! - `start.handle`: the agent ready, before `handle.json` is written;
//! - `start.gvisor.legacy_layout`: on gVisor, the start makes the agent-dir layout of
//!   an earlier sandboxd (tests of its adoption, see `gvisor::legacy`);
//! - `start.gvisor.handle`: on gVisor, the container created and started, before the
//!   agent is attached and `handle.json` written;
//! - `network.prepare`: the host side of an egress network leased and ruled;
//! - `network.connect`: the sandbox's link made (while the sandbox starts, into each
//!   namespace it tells; after it, into PID 1's, when it told none), before its
//!   `resolv.conf`;
//! - `network.reap`: the parked networks' reaper took expired ones off the list, before
//!   it removes them (the reaper configures its points from `SANDBOXD_FAILPOINTS`);
//! - `freeze`, `thaw`: pause and resume;
//! - `checkpoint.quiesce`: on gVisor, the agent taken not to let go of its socket in
//!   time for a checkpoint;
//! - `snapshot.freeze`: a filesystem snapshot about to freeze its RUNNING sandbox
//!   (engine);
//! - `snapshot.admission`: a snapshot under its sandbox's lock about to wait for
//!   admission (a filesystem snapshot's sandbox not frozen yet) (engine);
//! - `snapshot.measured`: a snapshot's layer measured (bytes and entries logged): a
//!   filesystem snapshot's measured frozen, before what it grew by since its reservation
//!   is reserved; a memory snapshot's before its admission (engine);
//! - `create.named`: a named create, under admission, about to look at an existing
//!   sandbox of that name (engine);
//! - `capture`: a snapshot's layer captured;
//! - `capture.copied`: the sandbox's upper dir copied into scratch, the sandbox still
//!   frozen for the copy;
//! - `restore.saved`: on gVisor, a restore's live handle saved, before its image goes;
//! - `snapshot_memory.restore`: a memory snapshot taken, before the sandbox is restored;
//! - `destroy.cgroup`, `destroy.unmount`, `destroy.dir`: the steps of a teardown;
//! - `warm.make`: a warm pool's entry about to be made (either tier's pool);
//! - `warm.owner`: a container warm entry's dir made and its owner mark written into an
//!   unnamed file, not yet linked in as `owner` (a process killed here leaves an empty
//!   entry dir, which the next sweep removes);
//! - in the engine, the store's writes: `store.insert_sandbox`, `store.save` (every
//!   sandbox update), `store.save.<STATUS>` (an update to that status),
//!   `store.insert_audit` (an audit entry, alone or with a create's RUNNING record) and
//!   `store.insert_snapshot`.

use crate::RuntimeError;

/// Whether a test asked step `name` to fail now (after any hang it asked for there).
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) -> bool {
    fail::eval(name, |_| ()).is_some()
}

/// Whether a test asked step `name` to fail now: never, without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(name: &str) -> bool {
    let _ = name;
    false
}

/// Configures the points `SANDBOXD_FAILPOINTS` names (`name=actions;…`, as for
/// `fail::cfg`), for tests of a whole process (`sandboxd run`).
#[cfg(feature = "failpoints")]
pub fn from_env() {
    let Ok(spec) = std::env::var("SANDBOXD_FAILPOINTS") else {
        return;
    };
    for pair in spec.split(';') {
        if let Some((name, actions)) = pair.split_once('=') {
            let _ = fail::cfg(name.trim(), actions.trim());
        }
    }
}

/// Nothing, without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
pub fn from_env() {}

/// Removes every configured point: a process forked to become something else (a held
/// init, see `held_fork`) starts with none, as an exec'd one does.
#[cfg(feature = "failpoints")]
pub fn clear() {
    for (name, _) in fail::list() {
        fail::remove(name);
    }
}

/// Nothing, without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
pub fn clear() {}

/// `Err(RuntimeError::Injected)` when a test asked step `name` to fail.
pub fn check(name: &'static str) -> Result<(), RuntimeError> {
    match hit(name) {
        true => Err(RuntimeError::Injected(name)),
        false => Ok(()),
    }
}
