//! Disk admission settings: `disk_overcommit` (`SANDBOXD_DISK_OVERCOMMIT`, 1.0 by
//! default: every admitted layer can fill up; at most 1000) and `disk_reserve_mb`
//! (`SANDBOXD_DISK_RESERVE_MB`, 64 by default: kept for the database and the server).

use super::{env_number, ConfigError};
use sandboxd_engine::DiskPolicy;
use serde::{Deserialize, Deserializer};
use std::str::FromStr;

/// The largest overcommit accepted (a typo like 1000 is refused rather than obeyed).
const MAX_OVERCOMMIT: f64 = 1000.0;

/// An overcommit factor in hundredths: a finite number above 0 and at most 1000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Overcommit(u32);

impl Overcommit {
    fn from_factor(x: f64) -> Result<Self, String> {
        if !(x.is_finite() && x > 0.0 && x <= MAX_OVERCOMMIT) {
            return Err(format!(
                "disk overcommit {x} is not a number above 0 and at most {MAX_OVERCOMMIT}"
            ));
        }
        Ok(Overcommit(((x * 100.0).round() as u32).max(1)))
    }
}

impl FromStr for Overcommit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let x: f64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
        Self::from_factor(x)
    }
}

impl<'de> Deserialize<'de> for Overcommit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::from_factor(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// `SANDBOXD_DISK_OVERCOMMIT` and `SANDBOXD_DISK_RESERVE_MB`, if set.
pub(super) fn from_env(
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(Option<Overcommit>, Option<u64>), ConfigError> {
    Ok((
        env_number(env, "SANDBOXD_DISK_OVERCOMMIT")?,
        env_number(env, "SANDBOXD_DISK_RESERVE_MB")?,
    ))
}

/// Overlays the settings given on `policy`.
pub(super) fn apply(over: Option<Overcommit>, reserve_mb: Option<u64>, policy: &mut DiskPolicy) {
    if let Some(Overcommit(percent)) = over {
        policy.overcommit_percent = percent;
    }
    if let Some(mb) = reserve_mb {
        policy.reserve_mb = mb;
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
    fn overcommit_and_reserve_from_file_then_env() {
        let d = load("", &[]).expect("defaults").limits().disk_policy;
        assert_eq!((d.overcommit_percent, d.reserve_mb), (100, 64));
        let file = "disk_overcommit = 2.5\ndisk_reserve_mb = 128\n";
        let d = load(file, &[]).expect("file").limits().disk_policy;
        assert_eq!((d.overcommit_percent, d.reserve_mb), (250, 128));
        let d = load(file, &[("SANDBOXD_DISK_OVERCOMMIT", "0.5")])
            .expect("env")
            .limits()
            .disk_policy;
        assert_eq!((d.overcommit_percent, d.reserve_mb), (50, 128));
        let d = load("disk_overcommit = 1\n", &[])
            .expect("an integer")
            .limits();
        assert_eq!(d.disk_policy.overcommit_percent, 100);
    }

    #[test]
    fn refuses_overcommits_that_are_not_a_positive_bounded_number() {
        for file in [
            "disk_overcommit = 0\n",
            "disk_overcommit = -1.0\n",
            "disk_overcommit = 1000.5\n",
            "disk_overcommit = nan\n",
            "disk_overcommit = \"2\"\n",
            "disk_reserve_mb = -1\n",
        ] {
            assert!(
                matches!(load(file, &[]), Err(ConfigError::Parse { .. })),
                "{file}"
            );
        }
        for bad in ["0", "inf", "lots", "-2"] {
            assert!(
                matches!(
                    load("", &[("SANDBOXD_DISK_OVERCOMMIT", bad)]),
                    Err(ConfigError::Env {
                        var: "SANDBOXD_DISK_OVERCOMMIT",
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }
}
