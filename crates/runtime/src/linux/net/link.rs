//! The sandbox's link: a veth pair whose inner end becomes `eth0` in the sandbox's
//! network namespace, addressed from its lease, plus the sandbox's `/etc/resolv.conf`.

use super::host::Lease;
use crate::RuntimeError;
use std::net::Ipv4Addr;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// Makes the pair with its inner end as `eth0` in the namespace of `pid`, and
/// addresses both ends with a default route via the host end (netlink and ioctls, no
/// processes).
pub fn create(ifname: &str, pid: i32, lease: &Lease) -> Result<(), RuntimeError> {
    super::netlink::create_veth(ifname, "eth0", pid)?;
    super::inner::configure_host_end(ifname, lease.host())?;
    super::inner::configure(pid, lease.sandbox(), lease.host())
}

/// Deletes the host end (gone already once the namespace died with the sandbox).
pub fn delete(ifname: &str) {
    match super::netlink::delete_link(ifname) {
        Err(e) if e.raw_os_error() != Some(libc::ENODEV) => {
            tracing::warn!(ifname, error = %e, "deleting a sandbox's link");
        }
        _ => {}
    }
}

fn resolv_conf_text(resolvers: &[Ipv4Addr]) -> String {
    let mut text = String::from("# written by sandboxd\n");
    for r in resolvers {
        text += &format!("nameserver {r}\n");
    }
    text
}

fn resolv_err(path: &Path) -> impl Fn(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        what: "writing the sandbox's resolv.conf",
        path: path.to_path_buf(),
        source,
    }
}

/// Stages `etc/resolv.conf` in an overlay upper dir before the root is mounted (an
/// `etc` dir there merges with the image's), owned by the sandbox's root (`owner`).
pub fn stage_resolv_conf(
    upper: &Path,
    resolvers: &[Ipv4Addr],
    owner: u32,
) -> Result<(), RuntimeError> {
    let etc = upper.join("etc");
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&etc)
        .map_err(resolv_err(&etc))?;
    let path = etc.join("resolv.conf");
    std::fs::write(&path, resolv_conf_text(resolvers)).map_err(resolv_err(&path))?;
    for path in [path, etc] {
        std::os::unix::fs::chown(&path, Some(owner), Some(owner)).map_err(resolv_err(&path))?;
    }
    Ok(())
}

/// Writes `etc/resolv.conf` under `root`, owned by the sandbox's root (`owner`).
pub fn write_resolv_conf(
    root: &Path,
    resolvers: &[Ipv4Addr],
    owner: u32,
) -> Result<(), RuntimeError> {
    let path = root.join("etc/resolv.conf");
    let err = resolv_err(&path);
    let text = resolv_conf_text(resolvers);
    if std::fs::symlink_metadata(&path)
        .map(|m| !m.is_file())
        .unwrap_or(false)
    {
        std::fs::remove_file(&path).map_err(&err)?;
    }
    std::fs::create_dir_all(root.join("etc")).map_err(&err)?;
    std::fs::write(&path, text).map_err(&err)?;
    std::os::unix::fs::chown(&path, Some(owner), Some(owner)).map_err(&err)
}
