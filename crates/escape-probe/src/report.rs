//! One attempt's outcome and its JSON line.

use std::io;

/// What one escape attempt tried and what the kernel answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub attempt: String,
    pub result: String,
    pub escaped: bool,
}

impl Attempt {
    /// An attempt the sandbox refused (or that found nothing to reach).
    pub fn refused(attempt: impl Into<String>, result: impl Into<String>) -> Self {
        Self {
            attempt: attempt.into(),
            result: result.into(),
            escaped: false,
        }
    }

    /// An attempt that got through: the sandbox leaked.
    pub fn escaped(attempt: impl Into<String>, result: impl Into<String>) -> Self {
        Self {
            attempt: attempt.into(),
            result: result.into(),
            escaped: true,
        }
    }

    /// Judges a raw syscall return: negative is a refusal named by errno.
    pub fn from_ret(attempt: impl Into<String>, ret: i64) -> Self {
        if ret < 0 {
            Self::refused(attempt, errno_name(io::Error::last_os_error()))
        } else {
            Self::escaped(attempt, format!("succeeded ({ret})"))
        }
    }

    /// Judges an I/O result: an error is a refusal, success an escape.
    pub fn from_io<T>(attempt: impl Into<String>, result: io::Result<T>) -> Self {
        match result {
            Ok(_) => Self::escaped(attempt, "succeeded"),
            Err(e) => Self::refused(attempt, errno_name(e)),
        }
    }

    /// The attempt as one line of JSON.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"attempt\":{},\"result\":{},\"escaped\":{}}}",
            json_string(&self.attempt),
            json_string(&self.result),
            self.escaped
        )
    }
}

/// The symbolic name of an errno (`EPERM`), or `errno N` for the rare ones.
pub fn errno_name(err: io::Error) -> String {
    let Some(code) = err.raw_os_error() else {
        return err.to_string();
    };
    let name = match code {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EBADF => "EBADF",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EINVAL => "EINVAL",
        libc::EROFS => "EROFS",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ENOEXEC => "ENOEXEC",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::ESOCKTNOSUPPORT => "ESOCKTNOSUPPORT",
        libc::EPROTOTYPE => "EPROTOTYPE",
        libc::EMFILE => "EMFILE",
        _ => return format!("errno {code}"),
    };
    name.to_owned()
}

/// A JSON string literal for `s`.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_escapes_quotes_and_controls() {
        let a = Attempt::refused("open \"x\"\n", "EPERM");
        assert_eq!(
            a.to_json(),
            r#"{"attempt":"open \"x\"\u000a","result":"EPERM","escaped":false}"#
        );
    }

    #[test]
    fn errno_names_are_symbolic() {
        assert_eq!(
            errno_name(io::Error::from_raw_os_error(libc::EPERM)),
            "EPERM"
        );
        assert_eq!(errno_name(io::Error::from_raw_os_error(4095)), "errno 4095");
    }
}
