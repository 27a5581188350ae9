//! Every escape attempt, grouped by what it goes after.

mod families;
mod files;
mod kernel;
mod leaks;
mod mounts;
mod net;
mod procs;
mod setuid;

use crate::report::Attempt;
use crate::targets::Targets;
use std::ffi::CString;

/// Runs all attempts in a fixed order.
pub fn all(t: &Targets) -> Vec<Attempt> {
    let mut out = Vec::new();
    out.extend(procs::attempts(t));
    out.extend(files::attempts(t));
    out.extend(mounts::attempts());
    out.extend(kernel::attempts());
    out.extend(net::attempts(t));
    out.extend(setuid::attempts());
    out.extend(leaks::attempts(t));
    out.extend(families::attempts());
    out
}

/// A C string for a path the probe itself chose (no interior NULs).
pub(crate) fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}
