//! The capability plan: keep a Docker-like default set, drop everything else from the
//! bounding, effective, permitted, inheritable and ambient sets.

use crate::ConfineError;
use caps::{CapSet, Capability, CapsHashSet};
use std::io;

/// Capabilities a confined command keeps (Docker's default set).
pub const DEFAULT_CAPABILITIES: [Capability; 14] = [
    Capability::CAP_CHOWN,
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_FSETID,
    Capability::CAP_FOWNER,
    Capability::CAP_MKNOD,
    Capability::CAP_NET_RAW,
    Capability::CAP_SETGID,
    Capability::CAP_SETUID,
    Capability::CAP_SETFCAP,
    Capability::CAP_SETPCAP,
    Capability::CAP_NET_BIND_SERVICE,
    Capability::CAP_SYS_CHROOT,
    Capability::CAP_KILL,
    Capability::CAP_AUDIT_WRITE,
];

/// Precomputed capability changes.
#[derive(Debug, Clone)]
pub(crate) struct CapPlan {
    /// Bounding-set members to drop (present now, not in the default set).
    drop_bounding: Vec<Capability>,
    /// The default set intersected with what the process is permitted now.
    keep: CapsHashSet,
}

/// Reads the current sets and works out what to drop.
pub(crate) fn plan() -> Result<CapPlan, ConfineError> {
    let keep_all: CapsHashSet = DEFAULT_CAPABILITIES.into_iter().collect();
    let bounding =
        caps::read(None, CapSet::Bounding).map_err(|e| ConfineError::Caps(e.to_string()))?;
    let permitted =
        caps::read(None, CapSet::Permitted).map_err(|e| ConfineError::Caps(e.to_string()))?;
    let mut drop_bounding: Vec<Capability> = bounding
        .into_iter()
        .filter(|c| !keep_all.contains(c))
        .collect();
    drop_bounding.sort_by_key(|c| c.index());
    let keep = permitted.intersection(&keep_all).copied().collect();
    Ok(CapPlan {
        drop_bounding,
        keep,
    })
}

impl CapPlan {
    /// Applies the plan to the calling thread.
    pub(crate) fn apply(&self) -> io::Result<()> {
        for cap in &self.drop_bounding {
            caps::drop(None, CapSet::Bounding, *cap).map_err(caps_err)?;
        }
        caps::clear(None, CapSet::Ambient).map_err(caps_err)?;
        // Effective first so that it always stays within the permitted set.
        for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
            caps::set(None, set, &self.keep).map_err(caps_err)?;
        }
        Ok(())
    }
}

fn caps_err(e: caps::errors::CapsError) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, e.to_string())
}
