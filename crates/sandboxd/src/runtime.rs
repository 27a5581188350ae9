//! Opens the runtime backends for this binary: the default (Linux-native) one, with
//! egress networking available to the sandboxes that ask for it, the gVisor tier, and
//! both behind one router ([`Tiers`]).

use anyhow::{Context, Result};
use sandboxd_runtime::linux::gvisor::{runsc, GvisorRuntime};
use sandboxd_runtime::linux::{HeldInit, LinuxConfig, LinuxRuntime, NetConfig, Tethers};
use sandboxd_runtime::tiers::Tiers;
use sandboxd_runtime::Runtime;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;

/// Opens the Linux backend with its state under `data_dir`, using this very binary
/// as the sandbox init. Sandboxes resolve names through `resolvers`, or the host's
/// upstream resolvers when `None`, and may open `max_ptys` PTYs each.
pub fn open_linux(
    data_dir: &Path,
    resolvers: Option<Vec<Ipv4Addr>>,
    max_ptys: u32,
) -> Result<LinuxRuntime> {
    // Root only, tightened if looser: sandbox- and image-made files (setuid programs
    // among them) lie below.
    sandboxd_runtime::linux::private_dir::ensure(data_dir)
        .with_context(|| format!("creating data directory {}", data_dir.display()))?;
    let data_dir = data_dir
        .canonicalize()
        .with_context(|| format!("resolving data directory {}", data_dir.display()))?;
    let runtime = LinuxRuntime::new(linux_config(data_dir, max_ptys)?)
        .context("opening the Linux sandbox backend")?;
    Ok(runtime.with_network(net_config(resolvers)))
}

/// `exec`: a one-shot run's held init is exec'd, not forked (see [`hold_init`]).
const RUN_INIT_ENV: &str = "SANDBOXD_RUN_INIT";

/// A sandbox init of this binary, spawned now and held until the backend begins it
/// (see `LinuxRuntime::with_early_init`); `None` (logged) when it cannot be spawned:
/// the start then spawns its own. Call it while the process has one thread and has read
/// nothing a sandbox must not hold (the init is forked from it, see `HeldInit::fork`).
pub fn hold_init() -> Option<HeldInit> {
    let held = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("locating the sandboxd binary: {e}"))
        .and_then(|exe| {
            let args = INIT_ARGS.map(String::from);
            // Forked, not exec'd: what `exe __sandbox-init --held` would run, in this
            // process's image (its exec cost a run 1.4-2 ms of wall time); exec'd
            // with `SANDBOXD_RUN_INIT=exec`, for a sandbox whose init shares nothing of
            // the run's memory and layout (see README, "Security model").
            let held = match std::env::var_os(RUN_INIT_ENV).is_some_and(|v| v == "exec") {
                true => HeldInit::spawn(&exe, &args),
                false => HeldInit::fork(&exe, &args, |sync_fd| {
                    crate::init::main(crate::init::InitArgs {
                        sync_fd,
                        held: true,
                    })
                }),
            };
            Ok(held?)
        });
    held.map_err(|e| tracing::debug!(error = %e, "no held init"))
        .ok()
}

/// Opens the gVisor tier with its state under `data_dir` (the same layout as the Linux
/// backend's: a data dir holds sandboxes of one tier), with egress networking as
/// [`open_linux`]'s; fails when `runsc` is missing.
pub fn open_gvisor(
    data_dir: &Path,
    resolvers: Option<Vec<Ipv4Addr>>,
    max_ptys: u32,
) -> Result<GvisorRuntime> {
    // Root only, tightened if looser: sandbox- and image-made files (setuid programs
    // among them) lie below.
    sandboxd_runtime::linux::private_dir::ensure(data_dir)
        .with_context(|| format!("creating data directory {}", data_dir.display()))?;
    let data_dir = data_dir
        .canonicalize()
        .with_context(|| format!("resolving data directory {}", data_dir.display()))?;
    let runtime = GvisorRuntime::new(linux_config(data_dir, max_ptys)?)
        .context("opening the gVisor sandbox backend")?;
    let features = runtime.runsc_features();
    tracing::info!(
        runsc = %features.version,
        egress_checkpoints = features.net_disconnect_ok,
        "gVisor tier: {}",
        match features.net_disconnect_ok {
            true => "sandboxes with egress can pause to disk (open TCP connections are reset)",
            false => "this runsc has no --net-disconnect-ok: sandboxes with egress pause in memory",
        }
    );
    Ok(runtime.with_network(net_config(resolvers)))
}

/// The gVisor backend as [`Tiers`] takes it: opened, tying its sandboxes to this
/// process with `tethers` if any, or why it cannot be (`runsc` missing, or the backend
/// failing to open).
pub fn gvisor_backend(
    data_dir: &Path,
    resolvers: Option<Vec<Ipv4Addr>>,
    max_ptys: u32,
    tethers: Option<Arc<Tethers>>,
) -> Result<Arc<dyn Runtime>, String> {
    if !GvisorRuntime::available() {
        return Err(runsc::missing_reason());
    }
    let gvisor = open_gvisor(data_dir, resolvers, max_ptys).map_err(|e| format!("{e:#}"))?;
    Ok(match tethers {
        Some(tethers) => Arc::new(gvisor.with_tethers(tethers)),
        None => Arc::new(gvisor),
    })
}

/// The warm gVisor sandboxes a server keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GvisorPool {
    /// This many, filled once [`GvisorRuntime::fill_warm_pool`] is called.
    Filled(usize),
    /// Up to this many, from the first gVisor start that could have taken one on
    /// ([`GvisorRuntime::with_warm_pool_on_demand`]).
    OnDemand(usize),
}

/// [`gvisor_backend`], keeping the warm gVisor sandboxes `pool` says.
pub fn gvisor_tier(
    data_dir: &Path,
    resolvers: Option<Vec<Ipv4Addr>>,
    max_ptys: u32,
    pool: GvisorPool,
) -> Result<Arc<GvisorRuntime>, String> {
    if !GvisorRuntime::available() {
        return Err(runsc::missing_reason());
    }
    match open_gvisor(data_dir, resolvers, max_ptys).and_then(|g| {
        match pool {
            GvisorPool::Filled(n) => g.with_warm_pool(n),
            GvisorPool::OnDemand(n) => g.with_warm_pool_on_demand(n),
        }
        .context("starting the gVisor warm pool")
    }) {
        Ok(gvisor) => Ok(Arc::new(gvisor)),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// Both tiers over `container`, the gVisor one opened when first needed (for
/// short-lived processes), tying its sandboxes to this process with `tethers` if any.
pub fn lazy_tiers(
    container: Arc<dyn Runtime>,
    data_dir: &Path,
    resolvers: Option<Vec<Ipv4Addr>>,
    max_ptys: u32,
    tethers: Option<Arc<Tethers>>,
) -> Tiers {
    let data_dir = data_dir.to_owned();
    Tiers::lazy(
        container,
        Box::new(move || gvisor_backend(&data_dir, resolvers, max_ptys, tethers)),
    )
}

/// The host's network configuration, with `resolvers` when given.
fn net_config(resolvers: Option<Vec<Ipv4Addr>>) -> NetConfig {
    let mut net = NetConfig::from_host();
    if let Some(resolvers) = resolvers {
        net.resolvers = resolvers;
    }
    net
}

/// The subcommand this binary runs as a sandbox's init (and agent).
const INIT_ARGS: [&str; 1] = ["__sandbox-init"];

/// The backend configuration with this very binary as the sandbox init (and agent).
fn linux_config(data_dir: std::path::PathBuf, max_ptys: u32) -> Result<LinuxConfig> {
    Ok(LinuxConfig {
        data_dir,
        init_exe: std::env::current_exe().context("locating the sandboxd binary")?,
        init_args: INIT_ARGS.map(String::from).to_vec(),
        cgroup_parent: cgroup_parent()?,
        max_ptys_per_sandbox: max_ptys,
    })
}

/// The parent cgroup of the sandboxes: `SANDBOXD_CGROUP_PARENT` (one plain name, under
/// each hierarchy's root), else `sandboxd`.
fn cgroup_parent() -> Result<String> {
    let Ok(name) = std::env::var("SANDBOXD_CGROUP_PARENT") else {
        return Ok("sandboxd".into());
    };
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    anyhow::ensure!(
        plain,
        "SANDBOXD_CGROUP_PARENT {name:?} is not a plain cgroup name (letters, digits, '-', '_', '.')"
    );
    Ok(name)
}
