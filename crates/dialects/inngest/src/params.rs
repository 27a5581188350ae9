//! Parsing and validation of path IDs, query parameters and request fields.

use crate::error::ApiError;
use sandboxd_engine::{ErrorCode, PageRequest};
use serde::Deserialize;
use std::collections::BTreeMap;
use uuid::Uuid;

/// Largest accepted file path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Largest `tailBytes`.
pub const MAX_TAIL_BYTES: u64 = 512 * 1024;

/// Parses a canonical lowercase UUID from a path; anything else names no resource.
pub fn path_id(raw: &str, missing: ErrorCode) -> Result<Uuid, ApiError> {
    canonical_uuid(raw).ok_or_else(|| ApiError::not_found(missing))
}

/// `Some` only for the canonical lowercase hyphenated form of a non-nil UUID.
pub fn canonical_uuid(raw: &str) -> Option<Uuid> {
    let id = Uuid::parse_str(raw).ok()?;
    (!id.is_nil() && id.hyphenated().to_string() == raw).then_some(id)
}

/// `?limit=&cursor=` of list routes.
#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
    /// Only used by the snapshot list.
    pub name: Option<String>,
}

impl PageQuery {
    /// Validated page request: limit 1–250 (default 50), cursor passed through opaque.
    pub fn page(&self) -> Result<PageRequest, ApiError> {
        let limit = match self.limit.as_deref() {
            None => 50,
            Some(raw) => raw
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=250).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid_field("limit must be an integer from 1 through 250")
                })?,
        };
        let cursor = self.cursor.clone().filter(|c| !c.is_empty());
        Ok(PageRequest { limit, cursor })
    }
}

/// A sandbox or snapshot name: 1–63 lowercase letters, digits, `_` or `-`.
pub fn validate_name(name: &str) -> Result<(), ApiError> {
    let ok = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    ok.then_some(()).ok_or_else(|| {
        ApiError::invalid_field("name must be 1-63 lowercase letters, digits, '_' or '-'")
    })
}

/// An argument vector: non-empty, item 0 absolute, no NUL bytes.
pub fn validate_command(argv: &[String]) -> Result<(), ApiError> {
    let Some(first) = argv.first() else {
        return Err(ApiError::invalid_field("command must not be empty"));
    };
    if !first.starts_with('/') {
        return Err(ApiError::invalid_field(
            "command must begin with an absolute executable path",
        ));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(ApiError::invalid_field(
            "command must not contain NUL bytes",
        ));
    }
    Ok(())
}

/// Environment keys are non-empty and free of `=`; nothing contains NUL.
pub fn validate_environment(env: &BTreeMap<String, String>) -> Result<(), ApiError> {
    for (key, value) in env {
        if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
            return Err(ApiError::invalid_field(format!(
                "environment key {key:?} must be non-empty and contain neither '=' nor NUL"
            )));
        }
    }
    Ok(())
}

/// An absolute path of at most 4096 bytes without NUL (used for files and cwd).
pub fn validate_path(field: &str, path: &str) -> Result<(), ApiError> {
    if !path.starts_with('/') || path.len() > MAX_PATH_BYTES || path.contains('\0') {
        return Err(ApiError::invalid_field(format!(
            "{field} must be an absolute path of at most {MAX_PATH_BYTES} bytes"
        )));
    }
    Ok(())
}

/// A validated argv, environment and working directory of Exec and process Start.
pub struct ProcessSpec {
    pub argv: Vec<String>,
    pub env: Option<BTreeMap<String, String>>,
    pub cwd: Option<String>,
}

impl ProcessSpec {
    /// Validates the wire fields; an empty `cwd` means the default `/`.
    pub fn parse(
        command: Vec<String>,
        environment: Option<BTreeMap<String, String>>,
        cwd: Option<String>,
    ) -> Result<Self, ApiError> {
        validate_command(&command)?;
        if let Some(env) = &environment {
            validate_environment(env)?;
        }
        let cwd = cwd.filter(|c| !c.is_empty());
        if let Some(cwd) = &cwd {
            validate_path("cwd", cwd)?;
        }
        Ok(Self {
            argv: command,
            env: environment,
            cwd,
        })
    }
}

/// A file mode written in octal, `0001` through `0777`; absent means `0644`.
pub fn parse_mode(raw: Option<&str>) -> Result<u32, ApiError> {
    let Some(raw) = raw else { return Ok(0o644) };
    let valid_digits =
        (1..=4).contains(&raw.len()) && raw.bytes().all(|b| (b'0'..=b'7').contains(&b));
    u32::from_str_radix(raw, 8)
        .ok()
        .filter(|m| valid_digits && (1..=0o777).contains(m))
        .ok_or_else(|| ApiError::invalid_field("mode must be octal 0001 through 0777"))
}

/// `tailBytes`, 0 (everything retained) through 524288.
pub fn parse_tail_bytes(raw: Option<&str>) -> Result<u64, ApiError> {
    let Some(raw) = raw else { return Ok(0) };
    raw.parse::<u64>()
        .ok()
        .filter(|n| *n <= MAX_TAIL_BYTES)
        .ok_or_else(|| {
            ApiError::invalid_field("tailBytes must be an integer from 0 through 524288")
        })
}

/// `follow`: exactly `true` or `false`, default false.
pub fn parse_follow(raw: Option<&str>) -> Result<bool, ApiError> {
    match raw {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(ApiError::invalid_field("follow must be true or false")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_lowercase_uuids() {
        let id = "b066bdf7-a57b-4d8b-a1a7-76eab1f91273";
        assert!(canonical_uuid(id).is_some());
        assert!(canonical_uuid(&id.to_uppercase()).is_none());
        assert!(canonical_uuid("b066bdf7a57b4d8ba1a776eab1f91273").is_none());
        assert!(canonical_uuid("{b066bdf7-a57b-4d8b-a1a7-76eab1f91273}").is_none());
        assert!(canonical_uuid("00000000-0000-0000-0000-000000000000").is_none());
    }

    #[test]
    fn page_limits() {
        let q = |limit: &str| {
            PageQuery {
                limit: Some(limit.into()),
                ..Default::default()
            }
            .page()
        };
        assert_eq!(PageQuery::default().page().unwrap().limit, 50);
        assert_eq!(q("250").unwrap().limit, 250);
        for bad in ["0", "251", "-1", "x", "1.5", ""] {
            assert!(q(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names() {
        assert!(validate_name("agent_job-42").is_ok());
        assert!(validate_name(&"a".repeat(63)).is_ok());
        for bad in ["", "Agent", "a b", "a.b", &"a".repeat(64)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn modes() {
        assert_eq!(parse_mode(None).unwrap(), 0o644);
        assert_eq!(parse_mode(Some("0640")).unwrap(), 0o640);
        assert_eq!(parse_mode(Some("755")).unwrap(), 0o755);
        assert_eq!(parse_mode(Some("0001")).unwrap(), 1);
        for bad in ["0000", "0", "1777", "0800", "abc", "", "00644", "-644"] {
            assert!(parse_mode(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn commands_paths_and_environment() {
        assert!(validate_command(&["/bin/true".into()]).is_ok());
        assert!(validate_command(&["true".into()]).is_err());
        assert!(validate_command(&[]).is_err());
        assert!(validate_path("path", "/tmp/x").is_ok());
        assert!(validate_path("path", "tmp/x").is_err());
        assert!(validate_path("path", &format!("/{}", "a".repeat(4096))).is_err());
        let env = BTreeMap::from([("A=B".to_string(), "x".to_string())]);
        assert!(validate_environment(&env).is_err());
    }

    #[test]
    fn tail_and_follow() {
        assert_eq!(parse_tail_bytes(Some("524288")).unwrap(), 524288);
        assert!(parse_tail_bytes(Some("524289")).is_err());
        assert!(parse_follow(Some("TRUE")).is_err());
        assert!(parse_follow(Some("true")).unwrap());
    }
}
