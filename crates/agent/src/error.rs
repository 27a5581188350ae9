//! Constructors for the typed [`AgentError`]s the agent answers with.

use sandboxd_agent_protocol::{AgentError, AgentErrorCode};
use std::io;

/// An error with its stable code and a message for humans.
pub(crate) fn error(code: AgentErrorCode, message: impl Into<String>) -> AgentError {
    AgentError {
        code,
        message: message.into(),
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> AgentError {
    error(AgentErrorCode::InvalidArgument, message)
}

/// Maps an I/O failure on `path` to `file_not_found`, `not_a_regular_file`,
/// `file_too_large`, `insufficient_storage`, `invalid_argument` or `io`.
pub(crate) fn file_io(path: &str, e: &io::Error) -> AgentError {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => error(
            AgentErrorCode::FileNotFound,
            format!("{path}: no such file"),
        ),
        Some(libc::ELOOP) | Some(libc::EISDIR) | Some(libc::ENXIO) => not_regular(path),
        Some(libc::EFBIG) => error(AgentErrorCode::FileTooLarge, format!("{path}: {e}")),
        // EBADMSG and EUCLEAN: ext4's checksum and corruption errors, what a layer whose
        // backing file could not be written (a full host) reports.
        Some(libc::ENOSPC | libc::EDQUOT | libc::EIO | libc::EBADMSG | libc::EUCLEAN) => {
            error(AgentErrorCode::InsufficientStorage, format!("{path}: {e}"))
        }
        // What the sandbox's own filesystem refuses the caller (its permissions, a
        // read-only mount, a name too long, a busy program): the request's fault, not
        // the agent's (they were `io`, answered as a server error).
        Some(
            libc::EACCES
            | libc::EPERM
            | libc::EROFS
            | libc::ENAMETOOLONG
            | libc::ETXTBSY
            | libc::EEXIST,
        ) => invalid(format!("{path}: {e}")),
        _ => error(AgentErrorCode::Io, format!("{path}: {e}")),
    }
}

pub(crate) fn not_regular(path: &str) -> AgentError {
    error(
        AgentErrorCode::NotARegularFile,
        format!("{path} is not a regular file"),
    )
}

/// Rejects strings that cannot reach the kernel intact.
pub(crate) fn check_no_nul(what: &str, s: &str) -> Result<(), AgentError> {
    if s.contains('\0') {
        return Err(invalid(format!("{what} contains a NUL byte")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_stable_codes() {
        let code = |errno| file_io("/p", &io::Error::from_raw_os_error(errno)).code;
        assert_eq!(code(libc::ENOENT), AgentErrorCode::FileNotFound);
        assert_eq!(code(libc::ELOOP), AgentErrorCode::NotARegularFile);
        assert_eq!(code(libc::EACCES), AgentErrorCode::InvalidArgument);
        assert_eq!(code(libc::EROFS), AgentErrorCode::InvalidArgument);
        assert_eq!(code(libc::EMFILE), AgentErrorCode::Io);
        assert!(check_no_nul("argv", "a\0b").is_err());
        assert!(check_no_nul("argv", "ab").is_ok());
    }
}
