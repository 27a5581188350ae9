//! Registries pulled from over plain HTTP although not on loopback
//! (`insecure_registries = ["host:port", …]`, `SANDBOXD_INSECURE_REGISTRIES=host:port,…`).
//! Entries are `host[:port]` as in image references: no scheme, no path.

use super::ConfigError;

/// The environment's list (comma-separated), if set.
pub(super) fn from_env(
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(raw) = env("SANDBOXD_INSECURE_REGISTRIES") else {
        return Ok(None);
    };
    let list: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    check(&list).map_err(|message| ConfigError::Env {
        var: "SANDBOXD_INSECURE_REGISTRIES",
        message,
    })?;
    Ok(Some(list))
}

/// Every entry is a `host[:port]`.
pub(super) fn check(list: &[String]) -> Result<(), String> {
    for entry in list {
        let bad = entry.is_empty()
            || entry.contains("://")
            || entry.contains('/')
            || entry.chars().any(|c| c.is_whitespace() || c.is_control());
        if bad {
            return Err(format!(
                "insecure registry {entry:?} is not host[:port] (no scheme, no path)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_host_and_port() {
        let env = |v: &'static str| {
            move |n: &str| (n == "SANDBOXD_INSECURE_REGISTRIES").then(|| v.to_owned())
        };
        assert_eq!(
            from_env(&env("reg.lan:5000, 10.0.0.2")).unwrap(),
            Some(vec!["reg.lan:5000".to_owned(), "10.0.0.2".to_owned()])
        );
        assert!(from_env(&env("http://reg.lan")).is_err());
        assert!(from_env(&env("reg.lan/team")).is_err());
        assert_eq!(from_env(&|_: &str| None).unwrap(), None);
    }
}
