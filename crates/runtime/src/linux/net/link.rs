//! The sandbox's link: a veth pair whose inner end becomes `eth0` in the sandbox's
//! network namespace, addressed from its lease, plus the sandbox's `/etc/resolv.conf`.

use super::host::Lease;
use crate::RuntimeError;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `prefix… ip -batch -` with `script` on stdin.
fn ip_batch(prefix: &[&str], script: &str) -> Result<(), RuntimeError> {
    let (exe, args) = match prefix.split_first() {
        Some((exe, rest)) => (*exe, [rest, &["ip", "-batch", "-"]].concat()),
        None => ("ip", vec!["-batch", "-"]),
    };
    let mut child = Command::new(exe)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RuntimeError::Network(format!("running ip: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| RuntimeError::Network(format!("writing to ip: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| RuntimeError::Network(format!("waiting for ip: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(RuntimeError::Network(format!(
            "ip: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Makes the pair, moves its inner end into the namespace of `pid` as `eth0`, and
/// addresses both ends with a default route via the host end.
pub fn create(ifname: &str, pid: i32, lease: &Lease) -> Result<(), RuntimeError> {
    let host = format!(
        "link add {ifname} type veth peer name eth0 netns {pid}\naddr add {}/30 dev {ifname}\nlink set {ifname} up\n",
        lease.host()
    );
    ip_batch(&[], &host)?;
    tracing::debug!(ifname, "veth made");
    super::inner::configure(pid, lease.sandbox(), lease.host())
}

/// Deletes the host end (gone already once the namespace died with the sandbox).
pub fn delete(ifname: &str) {
    let _ = Command::new("ip")
        .args(["link", "del", ifname])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Writes `etc/resolv.conf` under `root`, owned by the sandbox's root (`owner`).
pub fn write_resolv_conf(
    root: &Path,
    resolvers: &[Ipv4Addr],
    owner: u32,
) -> Result<(), RuntimeError> {
    let path = root.join("etc/resolv.conf");
    let err = |e: std::io::Error| RuntimeError::Io {
        what: "writing the sandbox's resolv.conf",
        path: path.clone(),
        source: e,
    };
    let mut text = String::from("# written by sandboxd\n");
    for r in resolvers {
        text += &format!("nameserver {r}\n");
    }
    if std::fs::symlink_metadata(&path)
        .map(|m| !m.is_file())
        .unwrap_or(false)
    {
        std::fs::remove_file(&path).map_err(err)?;
    }
    std::fs::create_dir_all(root.join("etc")).map_err(err)?;
    std::fs::write(&path, text).map_err(err)?;
    std::os::unix::fs::chown(&path, Some(owner), Some(owner)).map_err(err)
}
