//! The OCI bundle (`config.json`) a gVisor sandbox starts from: the host-mounted overlay
//! as its root, the `sandboxd` binary and the host's loader and libraries bound
//! read-only under `/.sandboxd`, and the agent's socket directory bound from the host.

use crate::RuntimeError;
use oci_spec::runtime::{
    LinuxNamespaceType, Mount, MountBuilder, ProcessBuilder, RootBuilder, Spec, UserBuilder,
};
use std::path::{Path, PathBuf};

/// Where the agent's files appear inside the sandbox (a capture leaves this dir out).
pub const AGENT_DIR: &str = "/.sandboxd";
/// The agent's socket dir inside the sandbox (bound from the host's `agent/`).
pub const SOCKET_DIR: &str = "/.sandboxd/run";
/// The agent's socket, as the agent names it inside the sandbox.
pub const SOCKET: &str = "/.sandboxd/run/agent.sock";
/// The file the agent writes next to its socket once it has let go of it before a
/// checkpoint: `ok`, or why the sandbox cannot be checkpointed (see `checkpoint.rs`).
pub const QUIESCED: &str = "quiesced";

/// What a bundle is made of.
pub struct Bundle<'a> {
    /// The mounted overlay root (host path).
    pub rootfs: &'a Path,
    /// Host dir the agent creates its socket in.
    pub socket_dir: &'a Path,
    /// The `sandboxd` binary on the host.
    pub agent_exe: &'a Path,
    pub hostname: &'a str,
    /// Bind the host's /usr read-only over the root's (the built-in image).
    pub host_usr: bool,
    /// The sandbox's network namespace (a file naming it), for egress: the sentry's
    /// network stack takes over its link (runsc `--network=sandbox`).
    pub netns: Option<&'a Path>,
    /// Bind the root's own `/tmp` (a real directory there, never a symlink: a bind
    /// source is resolved on the host).
    pub bind_tmp: bool,
}

fn bind(source: &Path, destination: &str, writable: bool) -> Result<Mount, RuntimeError> {
    let mode = if writable { "rw" } else { "ro" };
    MountBuilder::default()
        .destination(destination)
        .typ("bind")
        .source(source)
        .options(vec!["rbind".to_string(), mode.to_string()])
        .build()
        .map_err(spec_err)
}

fn spec_err(e: oci_spec::OciSpecError) -> RuntimeError {
    RuntimeError::AgentStart(format!("building the OCI bundle: {e}"))
}

/// The dynamic loader and library dir of the host, bound so that the host's `sandboxd`
/// runs in any image (whatever its libc, or none).
const HOST_LOADER: &str = "/lib64/ld-linux-x86-64.so.2";
const HOST_LIBS: &str = "/lib/x86_64-linux-gnu";

/// The agent's command line inside the sandbox.
fn agent_args() -> Vec<String> {
    [
        &format!("{AGENT_DIR}/ld.so"),
        "--library-path",
        &format!("{AGENT_DIR}/lib"),
        &format!("{AGENT_DIR}/sandboxd"),
        "__gvisor-agent",
        "--socket",
        SOCKET,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Builds the spec of `bundle`.
pub fn spec(bundle: &Bundle) -> Result<Spec, RuntimeError> {
    let mut spec = Spec::default();
    spec.set_root(Some(
        RootBuilder::default()
            .path(bundle.rootfs)
            .readonly(false)
            .build()
            .map_err(spec_err)?,
    ));
    spec.set_hostname(Some(bundle.hostname.to_string()));
    let process = ProcessBuilder::default()
        .terminal(false)
        .user(
            UserBuilder::default()
                .uid(0u32)
                .gid(0u32)
                .build()
                .map_err(spec_err)?,
        )
        .args(agent_args())
        .env(vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ])
        .cwd("/")
        .build()
        .map_err(spec_err)?;
    spec.set_process(Some(process));
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    // runsc refuses the default cgroup mount without cgroups of its own.
    mounts.retain(|m| m.typ().as_deref() != Some("cgroup"));
    if bundle.host_usr {
        mounts.push(bind(Path::new("/usr"), "/usr", false)?);
    }
    mounts.push(bind(
        bundle.agent_exe,
        &format!("{AGENT_DIR}/sandboxd"),
        false,
    )?);
    mounts.push(bind(
        Path::new(HOST_LOADER),
        &format!("{AGENT_DIR}/ld.so"),
        false,
    )?);
    mounts.push(bind(
        Path::new(HOST_LIBS),
        &format!("{AGENT_DIR}/lib"),
        false,
    )?);
    mounts.push(bind(bundle.socket_dir, SOCKET_DIR, true)?);
    // The root's own /tmp, bound so that runsc does not mount a tmpfs of its own there
    // (it does when the spec names no /tmp mount and the image's is empty): writes to
    // /tmp then live in the sentry's memory, which captures and snapshots cannot see.
    if bundle.bind_tmp {
        mounts.push(bind(&bundle.rootfs.join("tmp"), "/tmp", true)?);
    }
    spec.set_mounts(Some(mounts));
    if let Some(linux) = spec.linux_mut() {
        // Limits are the backend's own cgroup (runsc runs with --ignore-cgroups).
        linux.set_resources(None);
        linux.set_cgroups_path(None);
        if let (Some(netns), Some(namespaces)) = (bundle.netns, linux.namespaces_mut().as_mut()) {
            for ns in namespaces.iter_mut() {
                if ns.typ() == LinuxNamespaceType::Network {
                    ns.set_path(Some(netns.to_path_buf()));
                }
            }
        }
    }
    Ok(spec)
}

/// Writes `bundle`'s `config.json` into `dir`.
pub fn write(dir: &Path, bundle: &Bundle) -> Result<PathBuf, RuntimeError> {
    let path = dir.join("config.json");
    spec(bundle)?
        .save(&path)
        .map_err(|e| RuntimeError::AgentStart(format!("writing {}: {e}", path.display())))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_runs_through_the_bound_loader_and_its_socket_dir_is_writable() {
        let bundle = Bundle {
            rootfs: Path::new("/state/rootfs"),
            socket_dir: Path::new("/state/agent"),
            agent_exe: Path::new("/usr/bin/sandboxd"),
            hostname: "box",
            host_usr: false,
            netns: None,
            bind_tmp: true,
        };
        let spec = spec(&bundle).expect("spec");
        let json = serde_json::to_value(&spec).expect("json");
        assert_eq!(json["root"]["path"], "/state/rootfs");
        assert_eq!(json["hostname"], "box");
        assert_eq!(json["process"]["args"][0], "/.sandboxd/ld.so");
        assert_eq!(json["process"]["args"][3], "/.sandboxd/sandboxd");
        let mounts = json["mounts"].as_array().expect("mounts");
        let run = mounts
            .iter()
            .find(|m| m["destination"] == SOCKET_DIR)
            .expect("socket dir bound");
        assert_eq!(run["source"], "/state/agent");
        assert!(run["options"]
            .as_array()
            .expect("options")
            .contains(&"rw".into()));
        assert!(!mounts.iter().any(|m| m["destination"] == "/usr"));
        let tmp = mounts
            .iter()
            .find(|m| m["destination"] == "/tmp")
            .expect("/tmp bound (no runsc tmpfs)");
        assert_eq!(tmp["source"], "/state/rootfs/tmp");
        assert!(!mounts.iter().any(|m| m["type"] == "cgroup"));
        let net = |json: &serde_json::Value| {
            json["linux"]["namespaces"]
                .as_array()
                .expect("namespaces")
                .iter()
                .find(|n| n["type"] == "network")
                .expect("a network namespace")
                .clone()
        };
        assert_eq!(net(&json).get("path"), None, "network none: a new netns");
        let with_net = Bundle {
            netns: Some(Path::new("/state/netns")),
            ..bundle
        };
        let json = serde_json::to_value(super::spec(&with_net).expect("spec")).expect("json");
        assert_eq!(net(&json)["path"], "/state/netns");
    }
}
