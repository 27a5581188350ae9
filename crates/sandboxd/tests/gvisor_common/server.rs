//! The prologue the gVisor server tests share: skip without runsc, a canonical temp
//! data dir whose sandboxes are destroyed when the test ends (a server keeps them
//! running when it stops), and `sandboxd serve` on it with gVisor as the default tier
//! and no network. Included by the test files that also have `serve_bin`.

use super::gvisor_common::ServerLeftovers;
use super::serve_bin::Server;
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use std::path::PathBuf;

/// A data dir for gVisor servers. Declare it before the servers: when dropped (after
/// them) it destroys what they left, then removes the dir.
pub struct GvisorData {
    pub path: PathBuf,
    _leftovers: ServerLeftovers,
    _dir: tempfile::TempDir,
}

/// A fresh [`GvisorData`]; `None` (the test skips) when runsc is not installed.
pub fn gvisor_data() -> Option<GvisorData> {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return None;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().canonicalize().expect("canonical");
    Some(GvisorData {
        _leftovers: ServerLeftovers(path.clone()),
        path,
        _dir: dir,
    })
}

impl GvisorData {
    /// `sandboxd serve` on this dir with master key `master`: gVisor by default, no
    /// network, then `env` (which may replace those two).
    pub fn serve(&self, master: &str, env: &[(&str, &str)]) -> Server {
        let mut all = vec![
            ("SANDBOXD_ISOLATION", "gvisor"),
            ("SANDBOXD_NETWORK", "none"),
        ];
        all.extend_from_slice(env);
        Server::start_with_env(&self.path, Some(master), &all)
    }
}
