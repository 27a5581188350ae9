//! A sandbox's resource usage: its cgroup's counters, its writable layer's used blocks
//! and its network namespace's interface counters.

use super::cgroup::Cgroups;
use crate::{ResourceUsage, RuntimeError, SandboxHandle};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Everything [`ResourceUsage`] holds for a sandbox of the Linux backend.
pub(super) fn measure(
    cgroups: &Cgroups,
    handle: &SandboxHandle,
) -> Result<ResourceUsage, RuntimeError> {
    let mut usage = cgroups.usage(handle.id)?;
    usage.disk_used_bytes = layer_used(&super::disk::layer_dir(&handle.state_dir));
    let (rx, tx) = net_bytes(handle.agent_pid);
    usage.net_rx_bytes = rx;
    usage.net_tx_bytes = tx;
    Ok(usage)
}

/// Used bytes of the writable layer: of its filesystem when it is a mount of its own
/// (a size-limited layer), else the allocated blocks of the files under it.
fn layer_used(layer: &Path) -> u64 {
    let own_mount = match (
        std::fs::metadata(layer),
        layer.parent().map(std::fs::metadata),
    ) {
        (Ok(l), Some(Ok(p))) => l.dev() != p.dev(),
        _ => return 0,
    };
    if own_mount {
        if let Ok(st) = nix::sys::statvfs::statvfs(layer) {
            let used = st.blocks().saturating_sub(st.blocks_free());
            return used.saturating_mul(st.fragment_size());
        }
    }
    allocated_bytes(&layer.join("upper"))
}

/// Bytes allocated to the files under `dir`, not crossing into other filesystems.
pub fn allocated_bytes(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .same_file_system(true)
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.blocks().saturating_mul(512))
        .sum()
}

/// (received, sent) bytes over the interfaces of `pid`'s network namespace but `lo`.
fn net_bytes(pid: i32) -> (u64, u64) {
    if pid <= 0 {
        return (0, 0);
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap_or_default();
    parse_net_dev(&text)
}

/// Sums `/proc/net/dev`'s receive and transmit byte columns, `lo` left out.
fn parse_net_dev(text: &str) -> (u64, u64) {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| name.trim() != "lo")
        .filter_map(|(_, rest)| {
            let cols: Vec<u64> = rest
                .split_whitespace()
                .map(|c| c.parse().unwrap_or(0))
                .collect();
            Some((*cols.first()?, *cols.get(8)?))
        })
        .fold((0, 0), |(r, t), (a, b)| (r + a, t + b))
}

#[cfg(test)]
mod tests {
    #[test]
    fn net_dev_sums_all_but_loopback() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n  \
eth0:    5000      40    0    0    0     0          0         0     700       7    0    0    0     0       0          0\n";
        assert_eq!(super::parse_net_dev(text), (5000, 700));
    }
}
