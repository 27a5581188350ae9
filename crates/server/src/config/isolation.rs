//! `isolation`: which tier the server's sandboxes run on (`container`, the default, or
//! `gvisor`), from the config file or `SANDBOXD_ISOLATION`.

use super::ConfigError;

/// The isolation tier of a server's sandboxes (the runtime's: sandboxes carry it).
pub use sandboxd_engine::Isolation;

/// `SANDBOXD_ISOLATION` (`container` or `gvisor`), if set.
pub(super) fn from_env(
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Isolation>, ConfigError> {
    let var = "SANDBOXD_ISOLATION";
    match env(var).as_deref().map(str::trim) {
        None => Ok(None),
        Some("container") => Ok(Some(Isolation::Container)),
        Some("gvisor") => Ok(Some(Isolation::Gvisor)),
        Some(other) => Err(ConfigError::Env {
            var,
            message: format!("{other:?} is neither container nor gvisor"),
        }),
    }
}

/// `SANDBOXD_PAUSE_TO_DISK` (`true` or `false`), if set: whether pause writes a gVisor
/// sandbox's memory to disk (the default) or freezes it in memory.
pub(super) fn pause_to_disk_from_env(
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<bool>, ConfigError> {
    let var = "SANDBOXD_PAUSE_TO_DISK";
    match env(var).as_deref().map(str::trim) {
        None => Ok(None),
        Some("true" | "1") => Ok(Some(true)),
        Some("false" | "0") => Ok(Some(false)),
        Some(other) => Err(ConfigError::Env {
            var,
            message: format!("{other:?} is neither true nor false"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use crate::ServerConfig;

    #[test]
    fn isolation_comes_from_the_file_then_the_environment_and_rejects_unknown_tiers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "isolation = \"gvisor\"\n").expect("write");
        let none = |_: &str| None;
        let config = ServerConfig::load_with(Some(&file), none).expect("load");
        assert_eq!(config.isolation, super::Isolation::Gvisor);
        let env = |k: &str| (k == "SANDBOXD_ISOLATION").then(|| "container".to_string());
        let config = ServerConfig::load_with(Some(&file), env).expect("load");
        assert_eq!(config.isolation, super::Isolation::Container);
        assert_eq!(
            ServerConfig::load_with(None, none).expect("load").isolation,
            super::Isolation::Container
        );
        std::fs::write(&file, "pause_to_disk = false\n").expect("write");
        let config = ServerConfig::load_with(Some(&file), none).expect("load");
        assert!(!config.pause_to_disk && !config.limits().pause_to_disk);
        let env = |k: &str| (k == "SANDBOXD_PAUSE_TO_DISK").then(|| "true".to_string());
        assert!(
            ServerConfig::load_with(Some(&file), env)
                .expect("load")
                .pause_to_disk
        );
        assert!(
            ServerConfig::load_with(None, none)
                .expect("load")
                .pause_to_disk
        );
        let bad = |k: &str| (k == "SANDBOXD_ISOLATION").then(|| "vm".to_string());
        let err = ServerConfig::load_with(None, bad).expect_err("vm is no tier");
        assert!(err.to_string().contains("SANDBOXD_ISOLATION"), "{err}");
        std::fs::write(&file, "isolation = \"vm\"\n").expect("write");
        assert!(ServerConfig::load_with(Some(&file), none).is_err());
    }
}
