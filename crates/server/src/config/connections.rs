//! The API listener's limits (`[connections]`, `SANDBOXD_MAX_CONNECTIONS`,
//! `SANDBOXD_HEADER_READ_TIMEOUT_SECONDS`, `SANDBOXD_IDLE_TIMEOUT_SECONDS`): what a
//! client that opens connections and
//! sends nothing, or half a request, can hold of the server; and what one workspace's
//! long-lived requests and all captured execs' output may hold of it
//! (`SANDBOXD_MAX_IN_FLIGHT_PER_WORKSPACE`, `SANDBOXD_EXEC_OUTPUT_BUDGET_MIB`); and the pace
//! a request body must keep (`SANDBOXD_BODY_GRACE_SECONDS`,
//! `SANDBOXD_BODY_MIN_BYTES_PER_SECOND`).

use super::{env_number, ConfigError};
use sandboxd_dialect_common::BodyPace;
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
    /// How long a client may take to send a request's headers, counted from their first
    /// byte: a connection that takes longer is closed (10 s by default).
    pub header_read_timeout: Duration,
    /// How long a connection may wait with no request (new, or kept alive after one)
    /// before its client starts one: past it the connection is closed (310 s by default,
    /// longer than clients keep idle connections themselves — Go 90 s, Firefox 115 s,
    /// Chromium 300 s — so that they close first rather than send into a close; at the
    /// cap, the connection idle longest gives its place to a newcomer anyway).
    pub idle_timeout: Duration,
    /// Long-lived requests (execs, waits, streamed execs, followed output and logs,
    /// terminals) one workspace may have in flight at once, past which it gets 429;
    /// `None`: an eighth of `max` (512 of the default 4096), so one workspace can never
    /// hold the connections other workspaces need; `Some(0)`: no cap.
    pub max_in_flight_per_workspace: Option<u32>,
    /// MiB of captured exec output the server holds at once, all workspaces together
    /// (an exec reserves 3 × its output cap, 12 MiB for a 4 MiB cap, until its answer
    /// is sent; an exec finding no room within 5 s gets 503 with `Retry-After`);
    /// 512 by default; 0: no budget.
    pub exec_output_budget_mib: u64,
    /// The pace a request body must keep while the server waits for it: `grace` of
    /// waiting at first and banked at most, one more second per `min_rate` bytes
    /// received (20 s and 500 B/s by default, as Apache's `mod_reqtimeout`; a body that
    /// falls behind fails its request with 408 and its connection ends; a `min_rate` of
    /// 0 requires no pace). Without it one client holding headers-complete requests and
    /// a byte every few seconds could keep the whole connection cap.
    pub body_pace: BodyPace,
}

impl ConnectionLimits {
    /// The per-workspace cap on long-lived requests in flight (0: none).
    pub fn in_flight_per_workspace(&self) -> u32 {
        self.max_in_flight_per_workspace
            .unwrap_or_else(|| u32::try_from(self.max / 8).unwrap_or(u32::MAX).max(1))
    }
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max: 4096,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(310),
            max_in_flight_per_workspace: None,
            exec_output_budget_mib: 512,
            body_pace: BodyPace::default(),
        }
    }
}

/// `[connections]` in the config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConnectionsLayer {
    max: Option<usize>,
    header_read_timeout_seconds: Option<u64>,
    idle_timeout_seconds: Option<u64>,
    max_in_flight_per_workspace: Option<u32>,
    exec_output_budget_mib: Option<u64>,
    body_grace_seconds: Option<u64>,
    body_min_bytes_per_second: Option<u64>,
}

impl ConnectionsLayer {
    pub(super) fn from_env(
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        Ok(Some(ConnectionsLayer {
            max: env_number(env, "SANDBOXD_MAX_CONNECTIONS")?,
            header_read_timeout_seconds: env_number(env, "SANDBOXD_HEADER_READ_TIMEOUT_SECONDS")?,
            idle_timeout_seconds: env_number(env, "SANDBOXD_IDLE_TIMEOUT_SECONDS")?,
            max_in_flight_per_workspace: env_number(env, "SANDBOXD_MAX_IN_FLIGHT_PER_WORKSPACE")?,
            exec_output_budget_mib: env_number(env, "SANDBOXD_EXEC_OUTPUT_BUDGET_MIB")?,
            body_grace_seconds: env_number(env, "SANDBOXD_BODY_GRACE_SECONDS")?,
            body_min_bytes_per_second: env_number(env, "SANDBOXD_BODY_MIN_BYTES_PER_SECOND")?,
        }))
    }

    pub(super) fn apply(self, limits: &mut ConnectionLimits) {
        limits.max = self.max.unwrap_or(limits.max).clamp(1, MAX_CONNECTIONS);
        if let Some(secs) = self.header_read_timeout_seconds {
            limits.header_read_timeout = Duration::from_secs(secs.clamp(1, 86_400));
        }
        if let Some(secs) = self.idle_timeout_seconds {
            // At most a day, as the body grace (a `sleep_until` far past it is forever).
            limits.idle_timeout = Duration::from_secs(secs.clamp(1, 86_400));
        }
        if let Some(n) = self.max_in_flight_per_workspace {
            limits.max_in_flight_per_workspace = Some(n);
        }
        if let Some(mib) = self.exec_output_budget_mib {
            limits.exec_output_budget_mib = mib.min(u64::MAX >> 20);
        }
        if let Some(secs) = self.body_grace_seconds {
            // At least a second, at most a day (a `sleep_until` far past it is forever).
            limits.body_pace.grace = Duration::from_secs(secs.clamp(1, 86_400));
        }
        if let Some(rate) = self.body_min_bytes_per_second {
            limits.body_pace.min_rate = rate;
        }
    }
}
