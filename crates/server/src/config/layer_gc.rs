//! The background layer collector (`[layer_gc]`, `SANDBOXD_LAYER_GC_INTERVAL_SECONDS`,
//! `SANDBOXD_LAYER_GC_GRACE_SECONDS`): how often the server deletes the stored layers
//! nothing uses (0: never), and how old an unused layer must be to go.

use super::{env_number, ConfigError};
use serde::Deserialize;

/// The collector's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerGc {
    /// Seconds between collections (3600 by default; 0 turns the collector off).
    pub interval_seconds: u64,
    /// Unused layers younger than this stay (600 by default): one a snapshot has
    /// committed but not yet recorded.
    pub grace_seconds: u64,
}

impl Default for LayerGc {
    fn default() -> Self {
        LayerGc {
            interval_seconds: 3600,
            grace_seconds: 600,
        }
    }
}

/// `[layer_gc]` of the configuration file, or the environment's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LayerGcLayer {
    interval_seconds: Option<u64>,
    grace_seconds: Option<u64>,
}

impl LayerGcLayer {
    pub(super) fn from_env(
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        let layer = LayerGcLayer {
            interval_seconds: env_number(env, "SANDBOXD_LAYER_GC_INTERVAL_SECONDS")?,
            grace_seconds: env_number(env, "SANDBOXD_LAYER_GC_GRACE_SECONDS")?,
        };
        let empty = layer.interval_seconds.is_none() && layer.grace_seconds.is_none();
        Ok((!empty).then_some(layer))
    }

    pub(super) fn apply(self, to: &mut LayerGc) {
        if let Some(n) = self.interval_seconds {
            to.interval_seconds = n;
        }
        if let Some(n) = self.grace_seconds {
            to.grace_seconds = n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_overrides_each_setting() {
        let env = |n: &str| (n == "SANDBOXD_LAYER_GC_INTERVAL_SECONDS").then(|| "5".to_owned());
        let mut gc = LayerGc::default();
        LayerGcLayer::from_env(&env)
            .expect("env")
            .expect("set")
            .apply(&mut gc);
        assert_eq!((gc.interval_seconds, gc.grace_seconds), (5, 600));
        let bad = |n: &str| (n == "SANDBOXD_LAYER_GC_GRACE_SECONDS").then(|| "x".to_owned());
        assert!(LayerGcLayer::from_env(&bad).is_err());
        assert!(LayerGcLayer::from_env(&|_: &str| None)
            .expect("none")
            .is_none());
    }
}
