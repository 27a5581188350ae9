//! The abuse-limit settings of the server configuration: the per-workspace quota
//! (`[workspace_quota]`, `SANDBOXD_WORKSPACE_QUOTA_*`) and the create rate
//! (`[create_rate]`, `SANDBOXD_CREATE_RATE_*`).

use super::{env_number, ConfigError};
use sandboxd_engine::{CreateRate, Quota};
use serde::Deserialize;

/// `[workspace_quota]`: what one workspace may hold at once.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct QuotaLayer {
    sandboxes: Option<u32>,
    vcpu: Option<u32>,
    memory_mb: Option<u64>,
    snapshots: Option<u32>,
}

/// `[create_rate]`: the token bucket on creates per workspace.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RateLayer {
    burst: Option<u32>,
    per_hour: Option<u32>,
}

impl QuotaLayer {
    /// `SANDBOXD_WORKSPACE_QUOTA_{SANDBOXES,VCPU,MEMORY_MB,SNAPSHOTS}`.
    pub(super) fn from_env(
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        Ok(Some(QuotaLayer {
            sandboxes: env_number(env, "SANDBOXD_WORKSPACE_QUOTA_SANDBOXES")?,
            vcpu: env_number(env, "SANDBOXD_WORKSPACE_QUOTA_VCPU")?,
            memory_mb: env_number(env, "SANDBOXD_WORKSPACE_QUOTA_MEMORY_MB")?,
            snapshots: env_number(env, "SANDBOXD_WORKSPACE_QUOTA_SNAPSHOTS")?,
        }))
    }

    pub(super) fn apply(self, quota: &mut Quota) {
        quota.max_sandboxes = self.sandboxes.unwrap_or(quota.max_sandboxes);
        quota.max_vcpu = self.vcpu.unwrap_or(quota.max_vcpu);
        quota.max_memory_mb = self.memory_mb.unwrap_or(quota.max_memory_mb);
        quota.max_snapshots = self.snapshots.unwrap_or(quota.max_snapshots);
    }
}

impl RateLayer {
    /// `SANDBOXD_CREATE_RATE_{BURST,PER_HOUR}`.
    pub(super) fn from_env(
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        Ok(Some(RateLayer {
            burst: env_number(env, "SANDBOXD_CREATE_RATE_BURST")?,
            per_hour: env_number(env, "SANDBOXD_CREATE_RATE_PER_HOUR")?,
        }))
    }

    pub(super) fn apply(self, rate: &mut CreateRate) {
        rate.burst = self.burst.unwrap_or(rate.burst);
        rate.per_hour = self.per_hour.unwrap_or(rate.per_hour);
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{ConfigError, ServerConfig};
    use std::collections::HashMap;

    fn load(file: &str, env: &[(&str, &str)]) -> Result<ServerConfig, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sandboxd.toml");
        std::fs::write(&path, file).expect("write config");
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ServerConfig::load_with(Some(&path), |k| env.get(k).cloned())
    }

    #[test]
    fn quota_and_rate_from_file_then_env() {
        let defaults = load("", &[]).expect("defaults").limits();
        assert_eq!(defaults.workspace_quota, sandboxd_engine::Quota::default());
        assert_eq!(defaults.create_rate, sandboxd_engine::CreateRate::default());
        let file = "[workspace_quota]\nsandboxes = 3\nmemory_mb = 2048\nsnapshots = 7\n\n\
                    [create_rate]\nburst = 5\n";
        let l = load(file, &[]).expect("file").limits();
        let q = l.workspace_quota;
        assert_eq!(
            (q.max_sandboxes, q.max_vcpu, q.max_memory_mb),
            (3, defaults.workspace_quota.max_vcpu, 2048)
        );
        assert_eq!(q.max_snapshots, 7);
        assert_eq!((l.create_rate.burst, l.create_rate.per_hour), (5, 3600));
        let env = [
            ("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", "1"),
            ("SANDBOXD_WORKSPACE_QUOTA_VCPU", "2"),
            ("SANDBOXD_CREATE_RATE_PER_HOUR", "1"),
            ("SANDBOXD_WORKSPACE_QUOTA_SNAPSHOTS", "2"),
        ];
        let l = load(file, &env).expect("env").limits();
        let q = l.workspace_quota;
        assert_eq!((q.max_sandboxes, q.max_vcpu, q.max_memory_mb), (1, 2, 2048));
        assert_eq!(q.max_snapshots, 2);
        assert_eq!((l.create_rate.burst, l.create_rate.per_hour), (5, 1));
    }

    #[test]
    fn rejects_unknown_fields_and_bad_numbers() {
        for file in [
            "[workspace_quota]\nsandbox = 1\n",
            "[create_rate]\nper_minute = 1\n",
            "[create_rate]\nburst = -1\n",
        ] {
            assert!(
                matches!(load(file, &[]), Err(ConfigError::Parse { .. })),
                "{file}"
            );
        }
        let bad = load("", &[("SANDBOXD_CREATE_RATE_BURST", "many")]);
        assert!(matches!(
            bad,
            Err(ConfigError::Env {
                var: "SANDBOXD_CREATE_RATE_BURST",
                ..
            })
        ));
    }
}
