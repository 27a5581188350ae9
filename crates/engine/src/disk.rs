//! Disk sizes: the writable-layer size (MiB) a new sandbox gets, within the server's
//! maximum. 0 means no limit (the layer lives on the host's filesystem).

use crate::engine::Limits;
use crate::error::EngineError;

/// The smallest limited disk a sandbox may ask for (a smaller ext4 holds next to nothing).
pub const MIN_DISK_MB: u32 = 16;

/// The disk size of a new sandbox: `requested` (the create's own), else `inherited`
/// (the source snapshot's, so a workspace template's), else the server's default.
/// A requested or inherited size must be 0 or at least [`MIN_DISK_MB`], and within
/// the server's maximum (when one is set, 0 = no limit is past it):
/// `InvalidArgument` otherwise; an inherited size below the minimum is raised to it.
/// The server's own default is taken as configured (its start refuses one below the
/// minimum).
pub(crate) fn choose(
    requested: Option<u32>,
    inherited: Option<u32>,
    limits: &Limits,
) -> Result<u32, EngineError> {
    let (size, whose) = match (requested, inherited) {
        (Some(n), _) => (n, "the requested disk"),
        // Raised to the minimum when below it: a snapshot of a server whose default
        // was once that small (no longer accepted at start) stays restorable.
        (None, Some(n)) => (
            match n {
                1..MIN_DISK_MB => MIN_DISK_MB,
                n => n,
            },
            "the disk of its snapshot or template",
        ),
        (None, None) => return Ok(limits.disk_mb_per_sandbox),
    };
    let max = limits.max_disk_mb_per_sandbox;
    if (1..MIN_DISK_MB).contains(&size) {
        return Err(EngineError::invalid(format!(
            "{whose} ({size} MiB) is below the minimum of {MIN_DISK_MB} MiB"
        )));
    }
    match (size, max) {
        (_, 0) => Ok(size),
        (0, max) => Err(EngineError::invalid(format!(
            "{whose} has no size limit, but the server allows at most {max} MiB per sandbox"
        ))),
        (size, max) if size > max => Err(EngineError::invalid(format!(
            "{whose} ({size} MiB) exceeds the server's maximum of {max} MiB per sandbox"
        ))),
        (size, _) => Ok(size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn limits(default: u32, max: u32) -> Limits {
        Limits {
            disk_mb_per_sandbox: default,
            max_disk_mb_per_sandbox: max,
            ..Limits::default()
        }
    }

    fn refused(r: Result<u32, EngineError>) -> String {
        let e = r.expect_err("refused");
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        e.message
    }

    #[test]
    fn request_then_snapshot_then_default() {
        let l = limits(1024, 2048);
        assert_eq!(choose(Some(64), Some(512), &l).unwrap(), 64);
        assert_eq!(choose(None, Some(512), &l).unwrap(), 512);
        assert_eq!(choose(None, None, &l).unwrap(), 1024);
        assert_eq!(Limits::default().disk_mb_per_sandbox, 10 * 1024);
        assert_eq!(Limits::default().max_disk_mb_per_sandbox, 10 * 1024);
    }

    #[test]
    fn the_maximum_at_and_past_the_edge() {
        let l = limits(1024, 2048);
        assert_eq!(choose(Some(2048), None, &l).unwrap(), 2048);
        assert_eq!(choose(Some(MIN_DISK_MB), None, &l).unwrap(), MIN_DISK_MB);
        let m = refused(choose(Some(2049), None, &l));
        assert!(
            m.contains("(2049 MiB) exceeds the server's maximum of 2048"),
            "{m}"
        );
        let m = refused(choose(None, Some(4096), &l));
        assert!(
            m.starts_with("the disk of its snapshot or template (4096"),
            "{m}"
        );
        let m = refused(choose(Some(0), None, &l));
        assert!(m.contains("no size limit"), "{m}");
        let m = refused(choose(Some(MIN_DISK_MB - 1), None, &l));
        assert!(m.contains("below the minimum"), "{m}");
    }

    #[test]
    fn an_inherited_disk_below_the_minimum_is_raised_to_it() {
        // A snapshot of a server whose default was once below the minimum (accepted
        // before it was refused at start) stays restorable, on a disk a little larger.
        let l = limits(1024, 2048);
        assert_eq!(choose(None, Some(12), &l).unwrap(), MIN_DISK_MB);
        let m = refused(choose(Some(12), Some(64), &l));
        assert!(
            m.contains("below the minimum"),
            "a request is still refused: {m}"
        );
    }

    #[test]
    fn no_maximum_allows_any_size_and_no_limit() {
        let l = limits(0, 0);
        assert_eq!(choose(Some(0), None, &l).unwrap(), 0);
        assert_eq!(choose(Some(u32::MAX), None, &l).unwrap(), u32::MAX);
        assert_eq!(choose(None, None, &l).unwrap(), 0);
    }
}
