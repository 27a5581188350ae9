//! How much of the host's shared kernel tables one sandbox may hold: pseudo-terminals
//! (its devpts instance's `max=`) and open files (`RLIMIT_NOFILE` of its processes,
//! sized so that its pids limit times the hard limit stays within a share of the
//! host's `fs.file-max`).

/// PTYs one sandbox may have open at once (its devpts instance's `max=`). The host's
/// `kernel.pty.max` minus `kernel.pty.reserve` (3072 by default) is shared by all
/// sandboxes; the reserve stays the host's own.
pub const DEFAULT_MAX_PTYS: u32 = 64;

/// The soft `RLIMIT_NOFILE` a command starts with (raisable up to the hard limit).
pub const COMMAND_OPEN_FILES: u64 = 1024;
/// The highest hard `RLIMIT_NOFILE` a sandbox's processes get.
pub const MAX_OPEN_FILES: u64 = 4096;
/// The lowest hard limit, whatever the host's table size: fewer breaks ordinary tools.
pub const MIN_OPEN_FILES: u64 = 256;
/// The share of `fs.file-max` one sandbox's processes may hold together (1/N).
pub const FILE_MAX_SHARE: u64 = 4;

/// `(soft, hard)` `RLIMIT_NOFILE` for a sandbox of `pids_max` processes on this host:
/// hard is `fs.file-max / 4 / pids_max`, within [256, 4096]; soft is at most 1024.
pub fn open_files_limit(pids_max: u32) -> (u64, u64) {
    let file_max = std::fs::read_to_string("/proc/sys/fs/file-max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    open_files_for(file_max, pids_max)
}

/// Gives a sandbox's PID 1 (the agent) the sandbox's [`open_files_limit`] as both its
/// soft and hard `RLIMIT_NOFILE`: its commands inherit the hard limit (and start at a
/// soft one of at most [`COMMAND_OPEN_FILES`], which the agent sets), and nothing in the
/// sandbox can raise it (that takes `CAP_SYS_RESOURCE` in the host's user namespace).
pub(super) fn limit_open_files(pid1: i32, pids_max: u32) -> Result<(), crate::RuntimeError> {
    let (_, hard) = open_files_limit(pids_max);
    let limit = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: prlimit(2) on the sandbox's PID 1 with a limit we own; no old value read.
    let rc = unsafe { libc::prlimit(pid1, libc::RLIMIT_NOFILE, &limit, std::ptr::null_mut()) };
    match rc {
        0 => Ok(()),
        _ => Err(crate::RuntimeError::Sys {
            what: "limiting the sandbox's open files",
            source: nix::Error::last(),
        }),
    }
}

fn open_files_for(file_max: u64, pids_max: u32) -> (u64, u64) {
    let share = file_max / FILE_MAX_SHARE / u64::from(pids_max.max(1));
    let hard = share.clamp(MIN_OPEN_FILES, MAX_OPEN_FILES);
    (hard.min(COMMAND_OPEN_FILES), hard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hard_limit_follows_the_host_table_and_the_pids_limit() {
        // This host's 2.4M files: 1024 processes get 602 each, 128 get the ceiling.
        assert_eq!(open_files_for(2_466_116, 1024), (602, 602));
        assert_eq!(open_files_for(2_466_116, 128), (1024, 4096));
        // A small host's table still leaves ordinary tools their floor; a huge one is
        // capped; a pids limit of 0 (none given) is treated as 1.
        assert_eq!(open_files_for(100_000, 1024), (256, 256));
        assert_eq!(open_files_for(u64::MAX, 1024), (1024, 4096));
        assert_eq!(open_files_for(1 << 40, 0), (1024, 4096));
    }
}
