//! Where the Prometheus metrics are served: `metrics_listen` (an address, or `none`
//! for no metrics listener), `SANDBOXD_METRICS_LISTEN` overriding it.

use super::ConfigError;
use serde::Deserialize;
use std::net::SocketAddr;

/// The metrics listener's default address.
pub const DEFAULT_METRICS_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9464);

/// An address to serve `/metrics` on, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct MetricsListen(pub Option<SocketAddr>);

impl TryFrom<String> for MetricsListen {
    type Error = String;
    fn try_from(raw: String) -> Result<Self, String> {
        match raw.trim() {
            "none" => Ok(MetricsListen(None)),
            addr => addr
                .parse()
                .map(|a| MetricsListen(Some(a)))
                .map_err(|e| format!("{addr:?} is neither `none` nor an address: {e}")),
        }
    }
}

/// `SANDBOXD_METRICS_LISTEN`, if set.
pub(super) fn from_env(
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<MetricsListen>, ConfigError> {
    let var = "SANDBOXD_METRICS_LISTEN";
    env(var)
        .map(|raw| {
            MetricsListen::try_from(raw).map_err(|message| ConfigError::Env { var, message })
        })
        .transpose()
}

/// `SANDBOXD_AUDIT_RETENTION_DAYS`, if set.
pub(super) fn retention_from_env(
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<u32>, ConfigError> {
    super::env_number(env, "SANDBOXD_AUDIT_RETENTION_DAYS")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_an_address_or_an_error() {
        assert_eq!(
            MetricsListen::try_from("none".to_owned()),
            Ok(MetricsListen(None))
        );
        assert_eq!(
            MetricsListen::try_from("127.0.0.1:0".to_owned()),
            Ok(MetricsListen(Some("127.0.0.1:0".parse().unwrap())))
        );
        assert!(MetricsListen::try_from("nowhere".to_owned())
            .unwrap_err()
            .contains("neither `none`"));
    }
}
