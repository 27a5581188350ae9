//! The exec request body and every limit the spec puts on it.

use crate::error::ApiError;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Largest exec request body.
pub const BODY_LIMIT: usize = 128 * 1024;
pub const MAX_CMD_BYTES: usize = 64 * 1024;
pub const MAX_CWD_CHARS: usize = 1024;
pub const MAX_ENV_VARS: usize = 64;
pub const MAX_ENV_NAME_CHARS: usize = 128;
pub const MAX_ENV_VALUE_BYTES: usize = 8192;
pub const TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=3600;
pub const DEFAULT_TIMEOUT: u64 = 300;
pub const DEFAULT_CWD: &str = "/workspace";

/// `POST …/exec` as sent.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = ExecRequest)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    /// Nonblank shell command, at most 64 KiB, no NUL bytes; runs as `bash -lc`.
    #[schema(min_length = 1, max_length = 65536, pattern = r"\S")]
    pub cmd: String,
    /// Absolute working directory (default `/workspace`), at most 1024 characters; it
    /// must exist.
    #[schema(max_length = 1024, pattern = "^/")]
    pub cwd: Option<String>,
    /// Up to 64 variables: names `^[A-Za-z_][A-Za-z0-9_]{0,127}$`, values at most 8192
    /// bytes without NUL.
    #[schema(value_type = Option<crate::openapi::Env>)]
    pub env: Option<BTreeMap<String, String>>,
    /// 1-3600 seconds (default 300).
    #[schema(minimum = 1, maximum = 3600)]
    pub timeout_seconds: Option<u64>,
}

/// A request that passed every limit.
#[derive(Debug, PartialEq, Eq)]
pub struct ExecRequest {
    pub cmd: String,
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    pub timeout_seconds: u64,
}

/// `^[A-Za-z_][A-Za-z0-9_]{0,127}$`
fn env_name_ok(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    first_ok
        && name.len() <= MAX_ENV_NAME_CHARS
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl ExecBody {
    pub fn validate(self) -> Result<ExecRequest, ApiError> {
        if self.cmd.trim().is_empty() {
            return Err(ApiError::invalid("cmd must not be blank"));
        }
        if self.cmd.len() > MAX_CMD_BYTES || self.cmd.contains('\0') {
            return Err(ApiError::invalid("cmd must be at most 64 KiB without NUL"));
        }
        let cwd = self.cwd.unwrap_or_else(|| DEFAULT_CWD.to_owned());
        if !cwd.starts_with('/') || cwd.chars().count() > MAX_CWD_CHARS || cwd.contains('\0') {
            return Err(ApiError::invalid(
                "cwd must be an absolute path of at most 1024 characters",
            ));
        }
        let env = self.env.unwrap_or_default();
        check_env(&env)?;
        let timeout_seconds = self.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT);
        if !TIMEOUT_RANGE.contains(&timeout_seconds) {
            return Err(ApiError::invalid("timeout_seconds must be 1-3600"));
        }
        Ok(ExecRequest {
            cmd: self.cmd,
            cwd,
            env,
            timeout_seconds,
        })
    }
}

/// The spec's `env` (of a command, and of a sandbox's create): up to 64 variables,
/// names `^[A-Za-z_][A-Za-z0-9_]{0,127}$`, values at most 8192 bytes without NUL.
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if env.len() > MAX_ENV_VARS {
        return Err(ApiError::invalid("env has more than 64 variables"));
    }
    for (name, value) in env {
        if !env_name_ok(name) {
            return Err(ApiError::invalid(format!(
                "env name {name:?} is not allowed"
            )));
        }
        if value.len() > MAX_ENV_VALUE_BYTES || value.contains('\0') {
            return Err(ApiError::invalid(format!(
                "env value of {name} must be at most 8192 bytes without NUL"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(cmd: &str) -> ExecBody {
        ExecBody {
            cmd: cmd.into(),
            cwd: None,
            env: None,
            timeout_seconds: None,
        }
    }

    #[test]
    fn defaults() {
        let r = body("true").validate().unwrap();
        assert_eq!((r.cwd.as_str(), r.timeout_seconds), ("/workspace", 300));
    }

    #[test]
    fn env_names() {
        assert!(env_name_ok("_") && env_name_ok("A1_b") && env_name_ok(&"a".repeat(128)));
        assert!(!env_name_ok("") && !env_name_ok("1A") && !env_name_ok("A-B"));
        assert!(!env_name_ok(&"a".repeat(129)));
    }

    #[test]
    fn limits() {
        assert!(body(" \n\t").validate().is_err());
        assert!(body(&"x".repeat(MAX_CMD_BYTES)).validate().is_ok());
        assert!(body(&"x".repeat(MAX_CMD_BYTES + 1)).validate().is_err());
        assert!(body("a\0b").validate().is_err());
        let mut b = body("x");
        b.timeout_seconds = Some(0);
        assert!(b.validate().is_err());
        let mut b = body("x");
        b.cwd = Some("tmp".into());
        assert!(b.validate().is_err());
    }
}
