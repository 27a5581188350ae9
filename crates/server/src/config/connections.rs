//! The API listener's limits (`[connections]`, `SANDBOXD_MAX_CONNECTIONS`,
//! `SANDBOXD_HEADER_READ_TIMEOUT_SECONDS`): what a client that opens connections and
//! sends nothing, or half a request, can hold of the server.

use super::{env_number, ConfigError};
use serde::Deserialize;
use std::time::Duration;

/// The most connections a server may be configured to serve at once (far past any
/// descriptor limit; keeps the count a `u32` for the drain at shutdown).
pub const MAX_CONNECTIONS: usize = 1 << 20;

/// Bounds on the API's client connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once; one past it is answered 503 with `Retry-After` and
    /// closed (4096 by default).
    pub max: usize,
    /// How long a client may take to send a request's headers, counted from when the
    /// server starts waiting for them (also between keep-alive requests): a connection
    /// that takes longer is closed (10 s by default).
    pub header_read_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max: 4096,
            header_read_timeout: Duration::from_secs(10),
        }
    }
}

/// `[connections]` in the config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConnectionsLayer {
    max: Option<usize>,
    header_read_timeout_seconds: Option<u64>,
}

impl ConnectionsLayer {
    pub(super) fn from_env(
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        Ok(Some(ConnectionsLayer {
            max: env_number(env, "SANDBOXD_MAX_CONNECTIONS")?,
            header_read_timeout_seconds: env_number(env, "SANDBOXD_HEADER_READ_TIMEOUT_SECONDS")?,
        }))
    }

    pub(super) fn apply(self, limits: &mut ConnectionLimits) {
        limits.max = self.max.unwrap_or(limits.max).clamp(1, MAX_CONNECTIONS);
        if let Some(secs) = self.header_read_timeout_seconds {
            limits.header_read_timeout = Duration::from_secs(secs.max(1));
        }
    }
}
