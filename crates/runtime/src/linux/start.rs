//! `start`: spawn the init, answer its handshake from the host side (id maps, root,
//! cgroup), wait for the agent's socket, and remove everything again on any failure.

use super::cgroup::Limits;
use super::cgroup_self_move::SelfMove;
use super::handshake::{self, Channel, InitConfig, Msg};
use super::init_child::InitChild;
use super::init_process::{
    agent_err, expect, map_ids, protect_from_oom, spawn_init, wait_connectable,
};
use super::io;
use super::layer_pins::LayerPin;
use super::warm::Warm;
use super::{destroy, rootfs, sys, LinuxRuntime};
use crate::{faults, RuntimeError, SandboxHandle, SandboxSpec};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Called with the sandbox's network namespace as soon as it exists (before PID 1 is
/// set up), so the caller can connect it while the start goes on; with `None` when the
/// start goes on in a namespace it could not open (what was told before is then not
/// the sandbox's: the caller connects PID 1's once started).
pub(in crate::linux) type OnNetns<'a> = Option<&'a (dyn Fn(Option<OwnedFd>) + Sync)>;

/// Starts a sandbox with only `lo` (from an unwired warm init if there is one).
pub(super) fn start(rt: &LinuxRuntime, spec: &SandboxSpec) -> Result<SandboxHandle, RuntimeError> {
    start_notifying(rt, spec, None)
}

/// [`start`], telling `on_netns` the sandbox's network namespace once it exists.
pub(super) fn start_notifying(
    rt: &LinuxRuntime,
    spec: &SandboxSpec,
    on_netns: OnNetns<'_>,
) -> Result<SandboxHandle, RuntimeError> {
    let t0 = Instant::now();
    let (layers, pin) = rt.layer_stack(spec)?;
    phase(spec, t0, "layers stacked");
    let warm = rt.warm.as_ref().and_then(|pool| {
        pool.take(
            (spec.disk_mb, false),
            (&spec.image, spec.extra_layers.is_empty()),
            &layers,
            &Default::default(),
        )
    });
    // The early init (unless a pool's entry was taken), claimed in one step; its
    // network namespace is told as soon as its init has one, before its make ends: the
    // caller links it while the make goes on.
    let claimed = match &warm {
        None => rt
            .early
            .as_ref()
            .and_then(|early| early.claim(spec.disk_mb, &spec.image, &layers)),
        Some(_) => None,
    };
    let mut told_early = false;
    if let (Some(tell), Some(claimed)) = (on_netns, &claimed) {
        if let Some(ns) = claimed.netns() {
            tell(Some(ns));
            told_early = true;
            phase(spec, t0, "early namespace told");
        }
    }
    let warm = warm.or_else(|| claimed.and_then(super::warm::Claimed::wait));
    phase(spec, t0, "warm taken");
    // A parked init's network namespace exists already: told now (unless told above),
    // the caller links it while the rest of the start is done.
    let on_netns = match (on_netns, warm.as_ref().and_then(|w| w.parked)) {
        (Some(tell), Some((pid1, _))) => {
            if !told_early {
                tell(
                    std::fs::File::open(format!("/proc/{pid1}/ns/net"))
                        .ok()
                        .map(Into::into),
                );
            }
            None
        }
        (on_netns, _) => on_netns,
    };
    let started = start_with(rt, spec, layers, pin, warm, on_netns);
    phase(spec, t0, "started");
    started
}

/// Logs (debug) that the start of `spec` reached `name`, `t0` its beginning.
fn phase(spec: &SandboxSpec, t0: Instant, name: &str) {
    tracing::debug!(id = %spec.id, phase = name, ms = t0.elapsed().as_secs_f64() * 1e3, "start steps");
}

/// Starts a sandbox over `layers` (its [`LinuxRuntime::layer_stack`]) from `warm` if
/// given (taken from the pool for them), else cold; `pin` goes into its state dir.
pub(super) fn start_with(
    rt: &LinuxRuntime,
    spec: &SandboxSpec,
    layers: Vec<PathBuf>,
    pin: LayerPin,
    warm: Option<Warm>,
    on_netns: OnNetns<'_>,
) -> Result<SandboxHandle, RuntimeError> {
    // A warm entry's id slot (its maps are written) becomes the sandbox's.
    let slot = match (&warm, &rt.warm, &rt.early) {
        (Some(w), Some(pool), _) => pool.hand_over_slot(w, spec.id).map(|()| w.host_id_base),
        (Some(w), None, Some(early)) => early.hand_over_slot(w, spec.id).map(|()| w.host_id_base),
        _ => rt.slots.allocate(spec.id),
    };
    let host_id_base = match slot {
        Ok(prepared) => prepared,
        Err(e) => {
            if let Some(w) = warm {
                discard(rt, w);
            }
            return Err(e);
        }
    };
    let was_warm = warm.is_some();
    if rt.warm.is_some() {
        rt.warm_counts.count(was_warm);
    }
    let started = start_in(rt, spec, &layers, pin, host_id_base, warm, on_netns);
    let started = started.map(|mut h| {
        h.warm = was_warm;
        h
    });
    // Refilled once this start is done, so the refill does not compete with it.
    if let Some(pool) = &rt.warm {
        pool.refill_after(spec.disk_mb);
    }
    started
}

/// Ends a taken warm entry that will not be used, by what made it.
fn discard(rt: &LinuxRuntime, warm: Warm) {
    match (&rt.warm, &rt.early) {
        (Some(pool), _) => pool.discard(warm),
        (None, Some(early)) => early.discard_taken(warm),
        (None, None) => {}
    }
}

/// [`start`] once the slot is held: the state dir (a warm entry's, renamed), the launch,
/// and the clean-up of a failed one.
fn start_in(
    rt: &LinuxRuntime,
    spec: &SandboxSpec,
    layers: &[PathBuf],
    pin: LayerPin,
    host_id_base: u32,
    warm: Option<Warm>,
    on_netns: OnNetns<'_>,
) -> Result<SandboxHandle, RuntimeError> {
    let state_dir = rt.sandboxes_dir().join(spec.id.to_string());
    // A tethered sandbox's owner mark comes first: a sweeper never sees its dir unowned.
    let marked = match &rt.tethers {
        Some(tethers) => tethers.mark(spec.id, &rt.sandboxes_dir()),
        None => Ok(()),
    };
    // 0700: the agent socket and the sandbox's files are for host root only (a warm
    // entry's dir was made so). A warm entry's pin goes into its dir before the rename:
    // a failed write leaves the entry whole, for its discard below.
    // The collector's lock is held (by `pin`) through the rename.
    let pinned_in_entry = warm.is_some();
    let made = marked.and_then(|()| match &warm {
        Some(w) => write_pin(&pin, &w.dir).and_then(|()| {
            std::fs::rename(&w.dir, &state_dir)
                .map_err(io("creating the sandbox state dir", &state_dir))
        }),
        None => std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&state_dir)
            .map_err(io("creating the sandbox state dir", &state_dir)),
    });
    if let Err(e) = made {
        if let Some(w) = warm {
            discard(rt, w);
        }
        rt.slots.free(host_id_base, spec.id);
        if let Some(tethers) = &rt.tethers {
            tethers.release(spec.id);
        }
        return Err(e);
    }
    let mut handle = SandboxHandle {
        id: spec.id,
        agent_pid: 0,
        agent_start_ticks: 0,
        agent_socket: state_dir.join("agent.sock"),
        state_dir,
        host_id_base,
        warm: false,
        isolation: Default::default(),
    };
    let mut init: Option<InitChild> = None;
    let t0 = Instant::now();
    let pinned = match pinned_in_entry {
        true => Ok(()),
        false => write_pin(&pin, &handle.state_dir),
    };
    drop(pin);
    let launched = pinned.and_then(|()| {
        phase(spec, t0, "pin written");
        launch(rt, spec, layers, &mut handle, &mut init, warm, on_netns)
    });
    phase(spec, t0, "launched");
    match launched {
        Ok(()) => Ok(handle),
        Err(e) => {
            if let Some(mut child) = init {
                let _ = child.kill();
                let _ = child.wait();
            }
            match destroy::destroy(rt, &handle) {
                Ok(()) => {
                    if let Some(tethers) = &rt.tethers {
                        tethers.release(spec.id);
                    }
                }
                Err(cleanup) => {
                    tracing::error!(id = %spec.id, error = %cleanup, "cleaning up a failed start")
                }
            }
            Err(e)
        }
    }
}

/// Writes `pin` into `dir` (a test's `start.pin` failpoint fails it).
fn write_pin(pin: &LayerPin, dir: &Path) -> Result<(), RuntimeError> {
    faults::check("start.pin").and_then(|()| pin.record(dir))
}

fn launch(
    rt: &LinuxRuntime,
    spec: &SandboxSpec,
    layers: &[PathBuf],
    handle: &mut SandboxHandle,
    init: &mut Option<InitChild>,
    warm: Option<Warm>,
    on_netns: OnNetns<'_>,
) -> Result<(), RuntimeError> {
    let t0 = Instant::now();
    let tm = |phase: &str| tracing::debug!(id = %spec.id, phase, ms = t0.elapsed().as_secs_f64() * 1e3, "start");
    let warm = match warm {
        Some(w) if w.parked.is_some() => {
            // Its network namespace was told at its take (`start_notifying`).
            super::unpark::unpark(rt, spec, handle, w)?;
            tm("ready (parked)");
            let finished = finish(handle);
            tm("handle written");
            return finished;
        }
        other => other,
    };
    let log = handle.state_dir.join("init.log");
    let limits = Limits {
        vcpu: spec.vcpu,
        memory_mb: spec.memory_mb,
        pids_max: spec.pids_max,
    };
    // A fresh init moves itself into its cgroups before its exec on v1
    // (`cgroup_self_move`: no RCU grace period); on v2 its attach runs on a thread of
    // its own from the spawn on, while its disk is made and mounted, the init execs,
    // the root is mounted and PID 1 sets itself up.
    let (ours, pid1, self_moved) = std::thread::scope(|s| {
        let (ours, pid, stage, attach) = match warm {
            Some(w) => {
                let pid = w.child.id() as i32;
                *init = Some(w.child);
                let _ = faults::hit("start.warm_dir");
                if let Err(e) = rt.cgroups.rename(w.key, spec.id) {
                    if let Some(mut child) = init.take() {
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                    let _ = rt.cgroups.remove(w.key);
                    return Err(e);
                }
                rt.cgroups.set_limits(spec.id, limits)?;
                // The disk (if any) is mounted already: only the dirs on it remain.
                let base = handle.host_id_base;
                rootfs::prepare_dirs(&handle.state_dir, layers.len(), base, None)?;
                (w.channel, pid, Stage::Warm, None)
            }
            None => {
                let (ours, theirs) = handshake::pair().map_err(agent_err)?;
                // Its cgroups first (a few mkdirs and writes), so the init moves into
                // them while host-only work overlaps its exec.
                rt.cgroups.create(spec.id, limits)?;
                faults::check("start.cgroup")?;
                // On v1 the init moves itself before its exec (no grace period); on v2
                // it is attached from a thread, overlapping the disk and its exec.
                let moves = SelfMove::open(&rt.cgroups, spec.id)?;
                *init = Some(spawn_init(&rt.config, &theirs.0, &log, moves.as_ref())?);
                drop(theirs);
                tm("spawned");
                let pid = init.as_ref().map(|c| c.id() as i32).unwrap_or(0);
                let attach = moves.is_none().then(|| {
                    s.spawn(move || {
                        let attached = rt.cgroups.attach(spec.id, pid);
                        tm("attached");
                        attached
                    })
                });
                drop(moves);
                let disk = Some((rt.config.data_dir.as_path(), spec.disk_mb));
                rootfs::prepare_dirs(&handle.state_dir, layers.len(), handle.host_id_base, disk)?;
                tm("disk");
                faults::check("start.disk")?;
                (ours, pid, Stage::Fresh, attach)
            }
        };
        tm("prepared");
        if stage == Stage::Fresh {
            expect(&ours, &log, |m| matches!(m, Msg::UserNs).then_some(()))?;
        }
        // The init made its network namespace with its user namespace (PID 1 keeps
        // it); opened while the init lives. Told `None` when that fails (an early
        // init's namespace may have been told before): the caller then connects the
        // namespace of the started sandbox's PID 1.
        if let Some(tell) = on_netns {
            let ns = faults::check("start.netns_open")
                .ok()
                .and_then(|()| std::fs::File::open(format!("/proc/{pid}/ns/net")).ok());
            tell(ns.map(Into::into));
        }
        let prepared = prepare_and_go(rt, spec, layers, handle, &ours, pid, stage);
        let pid1 = prepared.and_then(|()| {
            expect(&ours, &log, |m| match m {
                Msg::Pid(p) => Some(*p),
                _ => None,
            })
        });
        let had_attach = attach.is_some();
        let attached = match attach {
            Some(attach) => attach.join().unwrap_or_else(|_| {
                Err(RuntimeError::AgentStart(
                    "attaching the init to its cgroups panicked".into(),
                ))
            }),
            None => Ok(()),
        };
        let self_moved = stage == Stage::Fresh && !had_attach;
        attached.and(pid1).map(|pid1| (ours, pid1, self_moved))
    })?;
    tm("pid");
    // PID 1 may have been forked before its parent moved (the attach of v2, from a
    // thread): then move it too. An init that moved itself forked it inside.
    if !self_moved && !rt.cgroups.holds(spec.id, pid1) {
        rt.cgroups.attach(spec.id, pid1)?;
    }
    if let Err(e) = ours.send(&Msg::Attached) {
        // PID 1 failed a step of its own: its report waits in the socket.
        expect(&ours, &log, |_| None::<()>)?;
        return Err(agent_err(e));
    }
    faults::check("start.handshake")?;
    expect(&ours, &log, |m| matches!(m, Msg::Ready).then_some(()))?;
    handle.agent_pid = pid1;
    handle.agent_start_ticks = sys::proc_stat(handle.agent_pid)
        .map(|(_, t)| t)
        .ok_or_else(|| RuntimeError::AgentStart("the agent exited right after starting".into()))?;
    if let Some(mut child) = init.take() {
        let _ = child.wait(); // the intermediate process exits once it has reported
    }
    super::bounds::limit_open_files(pid1, spec.pids_max)?;
    if let Some(tethers) = &rt.tethers {
        tethers.hold(spec.id, ours);
    }
    tm("ready");
    finish(handle)
}

/// Once the agent is ready: its socket accepts, and the handle is on disk.
fn finish(handle: &SandboxHandle) -> Result<(), RuntimeError> {
    faults::check("start.handle")?;
    let t0 = Instant::now();
    wait_connectable(&handle.agent_socket)?;
    tracing::debug!(id = %handle.id, ms = t0.elapsed().as_secs_f64() * 1e3, "start: agent accepts");
    super::handle_file::write(&handle.state_dir, handle)
}

/// Where a launch starts from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// A new init: its user namespace is reported, its ids are not mapped yet.
    Fresh,
    /// A warm init (not parked): ids mapped and OOM-protected already.
    Warm,
}

/// The handshake after the init's `UserNs` up to `Go`: id maps, the root mounted
/// through the user namespace, and the go-ahead to the init (what a warm entry did when
/// it was made is skipped).
fn prepare_and_go(
    rt: &LinuxRuntime,
    spec: &SandboxSpec,
    layers: &[PathBuf],
    handle: &SandboxHandle,
    ours: &Channel,
    pid: i32,
    stage: Stage,
) -> Result<(), RuntimeError> {
    let max_ptys = rt.config.max_ptys_per_sandbox;
    let userns = match stage {
        // (Its `UserNs` was received by the caller.)
        Stage::Fresh => {
            let userns = map_ids(pid, handle.host_id_base)?;
            protect_from_oom(pid)?;
            userns
        }
        Stage::Warm => {
            let ns_path = PathBuf::from(format!("/proc/{pid}/ns/user"));
            let file = std::fs::File::open(&ns_path)
                .map_err(io("opening the user namespace", &ns_path))?;
            OwnedFd::from(file)
        }
    };
    let host_usr = rt.wants_host_usr(&spec.image);
    // A wired warm entry staged its resolv.conf for any image; not over an `etc` link.
    let restage = match (&stage, &rt.network) {
        (Stage::Warm, Some(_)) => {
            let upper = rootfs::upper(&handle.state_dir);
            crate::linux::net::wired::unstage_over_linked_etc(&upper, layers)?
        }
        _ => false,
    };
    rootfs::mount_root(&handle.state_dir, layers, &userns, host_usr)?;
    if let (true, Some(net)) = (restage, &rt.network) {
        let root = rootfs::rootfs(&handle.state_dir);
        crate::linux::net::wired::write_after_mount(net, &root, handle.host_id_base)?;
    }
    faults::check("start.mount_root")?;
    let config = InitConfig {
        rootfs: rootfs::rootfs(&handle.state_dir),
        socket: handle.agent_socket.clone(),
        hostname: spec.hostname.clone(),
        park: false,
        max_ptys,
        tethered: rt.tethers.is_some(),
    };
    ours.send(&Msg::Go(config)).map_err(agent_err)?;
    Ok(())
}
