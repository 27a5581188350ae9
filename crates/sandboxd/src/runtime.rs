//! Opens the default (Linux-native) runtime backend for this binary, with egress
//! networking available to the sandboxes that ask for it.

use anyhow::{Context, Result};
use sandboxd_runtime::linux::{LinuxConfig, LinuxRuntime, NetConfig};
use std::net::Ipv4Addr;
use std::path::Path;

/// Opens the Linux backend with its state under `data_dir`, using this very binary
/// as the sandbox init. Sandboxes resolve names through `resolvers`, or the host's
/// upstream resolvers when `None`, and may open `max_ptys` PTYs each.
pub fn open_linux(
    data_dir: &Path,
    resolvers: Option<Vec<Ipv4Addr>>,
    max_ptys: u32,
) -> Result<LinuxRuntime> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating data directory {}", data_dir.display()))?;
    let data_dir = data_dir
        .canonicalize()
        .with_context(|| format!("resolving data directory {}", data_dir.display()))?;
    let init_exe = std::env::current_exe().context("locating the sandboxd binary")?;
    let runtime = LinuxRuntime::new(LinuxConfig {
        data_dir,
        init_exe,
        init_args: vec!["__sandbox-init".into()],
        cgroup_parent: "sandboxd".into(),
        max_ptys_per_sandbox: max_ptys,
    })
    .context("opening the Linux sandbox backend")?;
    let mut net = NetConfig::from_host();
    if let Some(resolvers) = resolvers {
        net.resolvers = resolvers;
    }
    Ok(runtime.with_network(net))
}
