//! `start` on gVisor: the overlay root mounted by the host (so captures and disk limits
//! work as on the container tier), the sandbox's cgroup joined by `runsc create` before
//! it forks the sentry and the gofer, then `runsc start` and the agent's socket. With
//! egress, the network namespace is made and wired first (see `net::netns`), and
//! `runsc create` boots the sentry's network stack over it.

use super::bundle::{self, Bundle};
use super::GvisorRuntime;
use crate::linux::cgroup::Limits;
use crate::linux::{io, rootfs, sys};
use crate::{NetworkMode, NetworkSpec, RuntimeError, SandboxHandle, SandboxSpec};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Host tasks the sentry and the gofer need beyond the sandbox's own (Go runtime
/// threads, ptrace stubs): the host pids limit is the sandbox's plus this.
pub const PIDS_OVERHEAD: u32 = 256;
/// Host memory the sentry and gofer need beyond the sandbox's own, in MiB.
pub const MEMORY_OVERHEAD_MB: u32 = 128;

pub(super) fn start(
    rt: &GvisorRuntime,
    spec: &SandboxSpec,
    network: &NetworkSpec,
) -> Result<SandboxHandle, RuntimeError> {
    start_from(rt, spec, network, None)
}

/// Starts a sandbox as [`start`] does, or, with `image`, by restoring that memory image
/// (a fork: the processes of the sandbox it was taken from run on in this one, over a
/// root of the same layers, which `spec` must name, under a fresh writable layer).
pub(super) fn start_from(
    rt: &GvisorRuntime,
    spec: &SandboxSpec,
    network: &NetworkSpec,
    image: Option<&Path>,
) -> Result<SandboxHandle, RuntimeError> {
    let state_dir = rt.linux.sandboxes_dir().join(spec.id.to_string());
    start_at(rt, spec, network, image, state_dir, None)
}

/// [`start_from`] in `state_dir` (a warm entry's lives under another name until taken),
/// writing `first` (a file name and its text) into it before anything else (a warm
/// entry's owner mark, so that a dir without one is never a make under way).
pub(super) fn start_at(
    rt: &GvisorRuntime,
    spec: &SandboxSpec,
    network: &NetworkSpec,
    image: Option<&Path>,
    state_dir: PathBuf,
    first: Option<(&str, &str)>,
) -> Result<SandboxHandle, RuntimeError> {
    let (layers, pin) = rt.linux.layer_stack(spec)?;
    // A run's sandbox (not a warm entry, which has its own first file): its owner mark
    // first, so that a sweeper never sees its dir unowned (see `tether`).
    if let (Some(tethers), None) = (&rt.linux.tethers, first) {
        tethers.mark(spec.id, &rt.linux.sandboxes_dir())?;
    }
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&state_dir) {
        if let Some(tethers) = &rt.linux.tethers {
            tethers.release(spec.id);
        }
        return Err(io("creating the sandbox state dir", &state_dir)(e));
    }
    if let Some((name, text)) = first {
        let path = state_dir.join(name);
        // Written whole: the dir shows no file until its text is complete.
        if let Err(e) = crate::linux::whole_file::create(&path, text) {
            // Gone already when a sweep took the dir while it was empty.
            let _ = std::fs::remove_dir_all(&state_dir);
            return Err(io("writing the sandbox's first file", &path)(e));
        }
    }
    if let Err(e) = pin.write(&state_dir) {
        let _ = std::fs::remove_dir_all(&state_dir);
        return Err(e);
    }
    let mut handle = SandboxHandle {
        id: spec.id,
        agent_pid: 0,
        agent_start_ticks: 0,
        agent_socket: match super::legacy::wanted() {
            true => super::legacy::socket(&state_dir),
            false => super::agent_dir::host_socket(&state_dir),
        },
        state_dir,
        host_id_base: 0,
        warm: false,
        isolation: crate::Isolation::Gvisor,
    };
    match launch(rt, spec, network, &layers, &mut handle, image) {
        Ok(()) => Ok(handle),
        Err(e) => {
            if let Err(cleanup) = super::destroy::destroy(rt, &handle) {
                tracing::error!(id = %spec.id, error = %cleanup, "cleaning up a failed gVisor start");
            }
            Err(e)
        }
    }
}

fn launch(
    rt: &GvisorRuntime,
    spec: &SandboxSpec,
    network: &NetworkSpec,
    layers: &[PathBuf],
    handle: &mut SandboxHandle,
    image: Option<&Path>,
) -> Result<(), RuntimeError> {
    let state_dir = handle.state_dir.clone();
    let disk = Some((rt.linux.config.data_dir.as_path(), spec.disk_mb));
    rootfs::prepare_dirs(&state_dir, 0, 0, disk)?;
    mount_root(&state_dir, layers)?;
    if super::legacy::wanted() {
        let dir = super::legacy::socket_dir(&state_dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io("creating the agent socket dir", &dir))?;
    } else {
        super::agent_dir::make(&state_dir)?;
    }
    let root = rootfs::rootfs(&state_dir);
    let netns = state_dir.join(rootfs::NETNS_FILE);
    let egress = network.mode == NetworkMode::Egress;
    if egress {
        crate::linux::net::netns::wire_new(&rt.linux, spec.id, network, &netns, &root)?;
    }
    write_bundle(rt, spec, &state_dir, egress)?;
    rt.linux.cgroups.create(spec.id, limits(spec))?;
    let state = state_dir.display().to_string();
    let pid_file = state_dir.join("sandbox.pid").display().to_string();
    let id = spec.id.to_string();
    match image {
        None => {
            let create = ["create", "--bundle", &state, "--pid-file", &pid_file, &id];
            run_in_cgroup(rt, spec.id, &state_dir, &create, egress)?;
            start_container(rt, &state_dir, &id, egress)?;
        }
        Some(image) => {
            let image = image.display().to_string();
            let restore = [
                "restore",
                "--detach",
                "--image-path",
                &image,
                "--bundle",
                &state,
                "--pid-file",
                &pid_file,
                &id,
            ];
            run_in_cgroup(rt, spec.id, &state_dir, &restore, egress)?;
            super::checkpoint::relisten(rt, handle)?;
            set_hostname(rt, &id, &spec.hostname)?;
        }
    }
    crate::faults::check("start.gvisor.handle")?;
    attach(handle)?;
    save_handle(handle)
}

/// Gives a running sandbox (runsc container `id`) another hostname: one restored from
/// another's image (runsc restores the UTS name the image holds, the bundle's is
/// ignored), or a warm entry taken by a start of another name. The agent lacks
/// `CAP_SYS_ADMIN`, so a helper (the agent's binary) runs with it through `runsc exec`.
pub(super) fn set_hostname(
    rt: &GvisorRuntime,
    id: &str,
    hostname: &str,
) -> Result<(), RuntimeError> {
    let dir = bundle::AGENT_DIR;
    let (ld, lib, exe) = (
        format!("{dir}/ld.so"),
        format!("{dir}/lib"),
        format!("{dir}/sandboxd"),
    );
    let args = [
        "exec",
        "--cap",
        "CAP_SYS_ADMIN",
        id,
        &ld,
        "--library-path",
        &lib,
        &exe,
        "__gvisor-hostname",
        hostname,
    ];
    rt.runsc.run(None, &args).map(|_| ())
}

/// The host cgroup limits of a sandbox of `spec`: its own plus the sentry's overhead.
pub(super) fn limits(spec: &SandboxSpec) -> Limits {
    Limits {
        vcpu: spec.vcpu,
        memory_mb: spec.memory_mb.saturating_add(MEMORY_OVERHEAD_MB),
        pids_max: spec.pids_max.saturating_add(PIDS_OVERHEAD),
    }
}

/// Writes the sandbox's OCI bundle for its state dir as it is named now (a warm entry's
/// is written again when taken: a restore reads its paths).
pub(super) fn write_bundle(
    rt: &GvisorRuntime,
    spec: &SandboxSpec,
    state_dir: &Path,
    egress: bool,
) -> Result<(), RuntimeError> {
    let root = rootfs::rootfs(state_dir);
    let bind_tmp = ensure_tmp(&root)?;
    let netns = state_dir.join(rootfs::NETNS_FILE);
    let socket_dir = match super::legacy::wanted() {
        true => super::legacy::socket_dir(state_dir),
        false => super::agent_dir::run_dir(state_dir),
    };
    bundle::write(
        state_dir,
        &Bundle {
            rootfs: &root,
            socket_dir: &socket_dir,
            agent_exe: &rt.linux.config.init_exe,
            hostname: &spec.hostname,
            host_usr: rt.linux.wants_host_usr(&spec.image),
            netns: egress.then_some(netns.as_path()),
            bind_tmp,
        },
    )?;
    Ok(())
}

/// Fills in the sandbox's host pid (runsc's pid file) and waits for its agent to accept.
pub(super) fn attach(handle: &mut SandboxHandle) -> Result<(), RuntimeError> {
    let state_dir = handle.state_dir.clone();
    let pid_file = state_dir.join("sandbox.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .map_err(io("reading the sandbox pid", &pid_file))?
        .trim()
        .parse()
        .map_err(|_| RuntimeError::AgentStart("runsc wrote no pid".into()))?;
    handle.agent_pid = pid;
    handle.agent_start_ticks = sys::proc_stat(pid)
        .map(|(_, t)| t)
        .ok_or_else(|| RuntimeError::AgentStart("the gVisor sandbox exited at once".into()))?;
    if super::legacy::wanted() {
        return crate::linux::init_process::wait_connectable(&handle.agent_socket);
    }
    super::agent_dir::wait_connectable(&state_dir, super::agent_dir::START_TIMEOUT).map_err(|e| {
        let log = super::agent_dir::log_tail(&state_dir);
        RuntimeError::AgentStart(format!("{e}; agent output: {log}"))
    })
}

/// Writes `handle` where [`crate::linux::LinuxRuntime::stored_handles`] finds it, whole
/// (a restore rewrites a live sandbox's: a crash mid-write leaves the old one).
pub(super) fn save_handle(handle: &SandboxHandle) -> Result<(), RuntimeError> {
    crate::linux::handle_file::write(&handle.state_dir, handle)
}

/// `runsc start`. This runsc sets the sandbox's network up here (from its own flags),
/// and first refuses a namespace where `/proc/sys/net/core/rmem_default` exists, taking
/// it for the host's: kernels since about 6.8 show that file in every network namespace
/// (gVisor issue 10704, fixed in releases after this one). With egress, `runsc start`
/// therefore runs in a mount namespace of its own with an empty tmpfs over `/proc/sys/net`
/// (it reads nothing there otherwise); the sentry, made by `create`, is not affected.
fn start_container(
    rt: &GvisorRuntime,
    state_dir: &Path,
    id: &str,
    egress: bool,
) -> Result<(), RuntimeError> {
    let mut cmd = rt.runsc.command_with_network(
        Some(&state_dir.join("runsc.log")),
        network_flag(egress),
        &["start", id],
    );
    if egress {
        hide_proc_sys_net(&mut cmd);
    }
    let output = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| RuntimeError::AgentStart(format!("running runsc start: {e}")))?;
    if !output.status.success() {
        return Err(RuntimeError::AgentStart(format!(
            "runsc start failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

/// Makes `cmd` run in a mount namespace of its own with an empty tmpfs over
/// `/proc/sys/net`, so that this runsc's check for the host's network namespace (the
/// file `core/rmem_default` there) passes in the sandbox's (see [`start_container`]).
fn hide_proc_sys_net(cmd: &mut std::process::Command) {
    // SAFETY: the hook makes only raw syscalls (unshare, mount) on static C strings.
    unsafe {
        cmd.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let none = std::ptr::null::<libc::c_char>();
            let private = libc::MS_REC | libc::MS_PRIVATE;
            if libc::mount(none, c"/".as_ptr(), none, private, std::ptr::null()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let tmpfs = c"tmpfs".as_ptr();
            if libc::mount(tmpfs, c"/proc/sys/net".as_ptr(), tmpfs, 0, std::ptr::null()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The root's `/tmp` (world-writable, sticky), made in the upper dir when the image has
/// none, for the bundle's `/tmp` bind; whether `/tmp` is a real directory (an image's
/// symlink there is left alone and not bound: the host would resolve it).
fn ensure_tmp(root: &Path) -> Result<bool, RuntimeError> {
    let tmp = root.join("tmp");
    if let Ok(meta) = tmp.symlink_metadata() {
        return Ok(meta.is_dir());
    }
    let what = "creating the sandbox's /tmp";
    std::fs::create_dir(&tmp).map_err(io(what, &tmp))?;
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
        .map_err(io(what, &tmp))?;
    Ok(true)
}

/// runsc's `--network` for a sandbox with or without egress.
fn network_flag(egress: bool) -> &'static str {
    if egress {
        "sandbox"
    } else {
        "none"
    }
}

/// The overlay of `layers` (top first, used in place: overlayfs never writes a lower
/// dir) under the writable upper dir, at `rootfs/`. Ownership stays as stored (0-based):
/// the sentry is the sandbox's kernel, and the gofer writes as host root.
pub(super) fn mount_root(state_dir: &Path, layers: &[PathBuf]) -> Result<(), RuntimeError> {
    let upper = rootfs::upper(state_dir);
    let work = upper.with_file_name("work");
    let lowers: Vec<String> = layers.iter().map(|l| l.display().to_string()).collect();
    crate::linux::overlay::mount_overlay(
        &rootfs::rootfs(state_dir),
        &lowers,
        &upper.display().to_string(),
        &work.display().to_string(),
    )
}

/// `runsc create` or `restore` (`args`), run inside the sandbox's cgroups (joined
/// between fork and exec) so that the sentry and gofer it forks are limited and killed
/// with them; the sandbox's own output goes to `agent.log`. A restore with egress sets
/// the network up itself (as `runsc start` does), so it runs as [`start_container`]'s
/// does, `/proc/sys/net` hidden; its sentry and gofer then live in that mount
/// namespace, which is the host's as it was (private: later host mounts stay unseen,
/// and none is needed, the root being mounted before).
pub(super) fn run_in_cgroup(
    rt: &GvisorRuntime,
    id: uuid::Uuid,
    state_dir: &Path,
    args: &[&str],
    egress: bool,
) -> Result<(), RuntimeError> {
    let procs: Vec<CString> = rt
        .linux
        .cgroups
        .dirs(id)
        .iter()
        .filter_map(|d| CString::new(d.join("cgroup.procs").as_os_str().as_bytes()).ok())
        .collect();
    let out_path = match super::legacy::wanted() {
        true => super::legacy::log_path(state_dir),
        false => super::agent_dir::log_path(state_dir),
    };
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&out_path)
        .map_err(io("opening the agent log", &out_path))?;
    let err = out
        .try_clone()
        .map_err(io("opening the agent log", &out_path))?;
    let mut cmd = rt.runsc.command_with_network(
        Some(&state_dir.join("runsc.log")),
        network_flag(egress),
        args,
    );
    cmd.stdout(Stdio::from(out)).stderr(Stdio::from(err));
    if egress && args.first() == Some(&"restore") {
        hide_proc_sys_net(&mut cmd);
    }
    // SAFETY: the hook only calls open/write/close (async-signal-safe) on prepared paths.
    unsafe {
        cmd.pre_exec(move || {
            for path in &procs {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if written != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let verb = args.first().copied().unwrap_or_default();
    let status = cmd
        .status()
        .map_err(|e| RuntimeError::AgentStart(format!("running runsc {verb}: {e}")))?;
    if !status.success() {
        let log = super::agent_dir::log_tail(state_dir);
        return Err(RuntimeError::AgentStart(format!(
            "runsc {verb} failed ({status}): {log}"
        )));
    }
    Ok(())
}
