//! Argument checks made before anything reaches the store, the runtime or the agent.

use crate::error::EngineError;
use std::collections::BTreeMap;

/// A sandbox name: 1–63 characters of `[a-z0-9_-]`.
pub fn sandbox_name(name: &str) -> Result<(), EngineError> {
    let ok = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    ok.then_some(()).ok_or_else(|| {
        EngineError::invalid(format!(
            "sandbox name {name:?} must be 1-63 characters of a-z, 0-9, '-' and '_'"
        ))
    })
}

/// A snapshot name: 1–128 printable characters.
pub fn snapshot_name(name: &str) -> Result<(), EngineError> {
    let ok = (1..=128).contains(&name.chars().count()) && !name.chars().any(char::is_control);
    ok.then_some(())
        .ok_or_else(|| EngineError::invalid("snapshot name must be 1-128 printable characters"))
}

/// An environment variable or secret name: `[A-Za-z_][A-Za-z0-9_]*`, at most 256 bytes.
pub fn env_name(name: &str) -> Result<(), EngineError> {
    let mut bytes = name.bytes();
    let ok = name.len() <= 256
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ok.then_some(())
        .ok_or_else(|| EngineError::invalid(format!("invalid variable name {name:?}")))
}

pub fn environment(env: &BTreeMap<String, String>) -> Result<(), EngineError> {
    for (k, v) in env {
        env_name(k)?;
        no_nul("environment value", v)?;
    }
    Ok(())
}

/// Most variables a sandbox's own (stored) environment may have.
pub const MAX_ENV_VARS: usize = 256;
/// Most bytes of one value of a sandbox's stored environment.
pub const MAX_ENV_VALUE_BYTES: usize = 32 << 10;
/// Most bytes of a sandbox's stored environment, names and values together.
pub const MAX_ENV_BYTES: usize = 64 << 10;

/// A sandbox's own environment, kept in its record for its whole life and after: valid
/// names and values, and bounded (at most [`MAX_ENV_VARS`] variables, values of at most
/// [`MAX_ENV_VALUE_BYTES`], [`MAX_ENV_BYTES`] in all).
pub fn stored_environment(env: &BTreeMap<String, String>) -> Result<(), EngineError> {
    environment(env)?;
    if env.len() > MAX_ENV_VARS {
        return Err(EngineError::invalid(format!(
            "the environment has {} variables, at most {MAX_ENV_VARS} are allowed",
            env.len()
        )));
    }
    if let Some((k, _)) = env.iter().find(|(_, v)| v.len() > MAX_ENV_VALUE_BYTES) {
        return Err(EngineError::invalid(format!(
            "the value of environment variable {k} is longer than {MAX_ENV_VALUE_BYTES} bytes"
        )));
    }
    let total: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_ENV_BYTES {
        return Err(EngineError::invalid(format!(
            "the environment takes {total} bytes, at most {MAX_ENV_BYTES} are allowed"
        )));
    }
    Ok(())
}

/// Most keys of a sandbox's client metadata.
pub const MAX_METADATA_KEYS: usize = 64;
/// Most bytes of one metadata key.
pub const MAX_METADATA_KEY_BYTES: usize = 128;
/// Most bytes of one metadata value.
pub const MAX_METADATA_VALUE_BYTES: usize = 512;

/// A sandbox's client metadata, kept in its record: at most [`MAX_METADATA_KEYS`]
/// keys of 1 to [`MAX_METADATA_KEY_BYTES`] bytes, values of at most
/// [`MAX_METADATA_VALUE_BYTES`] bytes, no NUL.
pub fn metadata(meta: &BTreeMap<String, String>) -> Result<(), EngineError> {
    if meta.len() > MAX_METADATA_KEYS {
        return Err(EngineError::invalid(format!(
            "metadata has {} keys, at most {MAX_METADATA_KEYS} are allowed",
            meta.len()
        )));
    }
    for (k, v) in meta {
        if k.is_empty() || k.len() > MAX_METADATA_KEY_BYTES {
            return Err(EngineError::invalid(format!(
                "metadata keys must be 1-{MAX_METADATA_KEY_BYTES} bytes long"
            )));
        }
        if v.len() > MAX_METADATA_VALUE_BYTES {
            return Err(EngineError::invalid(format!(
                "metadata value of {k:?} is longer than {MAX_METADATA_VALUE_BYTES} bytes"
            )));
        }
        no_nul("a metadata key", k)?;
        no_nul("a metadata value", v)?;
    }
    Ok(())
}

/// Most workspace secrets one sandbox may name (each a variable name of at most 256
/// bytes, so a sandbox's list stays under 64 KiB).
pub const MAX_SECRETS: usize = 256;

/// The secrets a sandbox names, kept in its record: valid names, at most
/// [`MAX_SECRETS`] of them.
pub fn secret_names(names: &[String]) -> Result<(), EngineError> {
    if names.len() > MAX_SECRETS {
        return Err(EngineError::invalid(format!(
            "{} secrets are named, at most {MAX_SECRETS} are allowed",
            names.len()
        )));
    }
    names.iter().try_for_each(|n| env_name(n))
}

/// Most rules of one allow or deny list of an egress policy (each rule a CIDR or a
/// domain name of at most 253 bytes).
pub const MAX_EGRESS_RULES: usize = 256;

/// An egress policy layer, kept with the sandbox (or its workspace): at most
/// [`MAX_EGRESS_RULES`] allow and as many deny rules.
pub fn egress_policy(policy: &sandboxd_runtime::EgressPolicy) -> Result<(), EngineError> {
    for (list, rules) in [("allow", &policy.allow), ("deny", &policy.deny)] {
        if rules.len() > MAX_EGRESS_RULES {
            return Err(EngineError::invalid(format!(
                "the egress {list} list has {} rules, at most {MAX_EGRESS_RULES} are allowed",
                rules.len()
            )));
        }
    }
    Ok(())
}

fn no_nul(what: &str, s: &str) -> Result<(), EngineError> {
    match s.contains('\0') {
        true => Err(EngineError::invalid(format!("{what} contains a NUL byte"))),
        false => Ok(()),
    }
}

/// An absolute path inside the sandbox without NUL bytes.
pub fn abs_path(what: &str, path: &str) -> Result<(), EngineError> {
    no_nul(what, path)?;
    match path.starts_with('/') {
        true => Ok(()),
        false => Err(EngineError::invalid(format!(
            "{what} {path:?} must be an absolute path"
        ))),
    }
}

/// A command: non-empty argv, absolute executable, no NUL anywhere.
pub fn command(
    argv: &[String],
    env: Option<&BTreeMap<String, String>>,
    cwd: Option<&str>,
) -> Result<(), EngineError> {
    let exe = argv
        .first()
        .ok_or_else(|| EngineError::invalid("argv must not be empty"))?;
    abs_path("executable", exe)?;
    for arg in argv {
        no_nul("argument", arg)?;
    }
    if let Some(env) = env {
        environment(env)?;
    }
    if let Some(cwd) = cwd {
        abs_path("working directory", cwd)?;
    }
    Ok(())
}

/// A signal number: 1–64.
pub fn signal(sig: i32) -> Result<(), EngineError> {
    match (1..=64).contains(&sig) {
        true => Ok(()),
        false => Err(EngineError::invalid(format!("signal {sig} is not in 1-64"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names() {
        assert!(sandbox_name("web-1_a").is_ok());
        assert!(sandbox_name("").is_err());
        assert!(sandbox_name("Web").is_err());
        assert!(sandbox_name(&"a".repeat(64)).is_err());
        assert!(env_name("_A1").is_ok() && env_name("1A").is_err() && env_name("A-B").is_err());
    }

    #[test]
    fn commands() {
        assert!(command(&s(&["/bin/echo", "hi"]), None, Some("/tmp")).is_ok());
        assert!(command(&s(&["echo"]), None, None).is_err());
        assert!(command(&[], None, None).is_err());
        assert!(command(&s(&["/bin/echo", "a\0b"]), None, None).is_err());
        assert!(command(&s(&["/bin/true"]), None, Some("tmp")).is_err());
        let env = BTreeMap::from([("A".to_string(), "x\0".to_string())]);
        assert!(command(&s(&["/bin/true"]), Some(&env), None).is_err());
    }

    #[test]
    fn signals() {
        assert!(signal(1).is_ok() && signal(64).is_ok());
        assert!(signal(0).is_err() && signal(65).is_err() && signal(-9).is_err());
    }
}
