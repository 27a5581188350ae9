//! autoPause (`[auto_pause]`, `SANDBOXD_AUTO_PAUSE_MEMORY_BUDGET_MB`,
//! `SANDBOXD_AUTO_PAUSE_MIN_AVAILABLE_MB`, `SANDBOXD_AUTO_PAUSE_INTERVAL_MS`): when
//! sandboxes that consented are moved to disk for memory, and how often that is checked.

use super::{env_number, ConfigError};
use sandboxd_engine::AutoPause;
use serde::Deserialize;
use std::time::Duration;

/// `[auto_pause]` of the configuration file, or the environment's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AutoPauseLayer {
    /// MiB the sandboxes' resident memory may take together (0: no budget).
    memory_budget_mb: Option<u64>,
    /// The host's `MemAvailable` in MiB below which sandboxes go to disk (0: not watched).
    min_available_mb: Option<u64>,
    /// Milliseconds between checks (0: never checked).
    interval_ms: Option<u64>,
}

impl AutoPauseLayer {
    pub(super) fn from_env(
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        let layer = AutoPauseLayer {
            memory_budget_mb: env_number(env, "SANDBOXD_AUTO_PAUSE_MEMORY_BUDGET_MB")?,
            min_available_mb: env_number(env, "SANDBOXD_AUTO_PAUSE_MIN_AVAILABLE_MB")?,
            interval_ms: env_number(env, "SANDBOXD_AUTO_PAUSE_INTERVAL_MS")?,
        };
        let empty = layer.memory_budget_mb.is_none()
            && layer.min_available_mb.is_none()
            && layer.interval_ms.is_none();
        Ok((!empty).then_some(layer))
    }

    pub(super) fn apply(self, to: &mut AutoPause) {
        if let Some(n) = self.memory_budget_mb {
            to.memory_budget_mb = n;
        }
        if let Some(n) = self.min_available_mb {
            to.min_available_mb = n;
        }
        if let Some(n) = self.interval_ms {
            to.interval = Duration::from_millis(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ServerConfig;
    use std::time::Duration;

    #[test]
    fn auto_pause_comes_from_the_file_then_the_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "[auto_pause]\nmemory_budget_mb = 512\ninterval_ms = 250\n",
        )
        .expect("write");
        let none = |_: &str| None;
        let l = ServerConfig::load_with(Some(&file), none)
            .expect("load")
            .limits();
        assert_eq!(l.auto_pause.memory_budget_mb, 512);
        assert_eq!(l.auto_pause.interval, Duration::from_millis(250));
        assert_eq!(l.auto_pause.min_available_mb, 256, "the default stays");
        let env = |k: &str| (k == "SANDBOXD_AUTO_PAUSE_MEMORY_BUDGET_MB").then(|| "1".to_string());
        let l = ServerConfig::load_with(Some(&file), env)
            .expect("load")
            .limits();
        assert_eq!(l.auto_pause.memory_budget_mb, 1, "the environment wins");
        let l = ServerConfig::load_with(None, none).expect("load").limits();
        assert_eq!(l.auto_pause, sandboxd_engine::AutoPause::default());
        let bad = |k: &str| (k == "SANDBOXD_AUTO_PAUSE_INTERVAL_MS").then(|| "soon".to_string());
        assert!(ServerConfig::load_with(None, bad).is_err());
        std::fs::write(&file, "[auto_pause]\nbudget = 1\n").expect("write");
        assert!(ServerConfig::load_with(Some(&file), none).is_err());
    }
}
