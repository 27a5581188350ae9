//! State one agent shares between its connections: configuration, the managed-process
//! registry and the sandbox-level log.

use crate::feed::Feed;
use crate::registry::Registry;
use crate::AgentConfig;
use bytes::Bytes;
use sandboxd_agent_protocol::StreamKind;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// How long a finished process's output pipes may stay open (held by a descendant)
/// before the process is reported terminal anyway.
pub(crate) const DRAIN_GRACE: Duration = Duration::from_secs(1);

pub(crate) struct Shared {
    pub config: AgentConfig,
    registry: Mutex<Registry>,
    log: Mutex<Feed>,
    /// Cancelled to end every open connection (and PTY bridge) at once; replaced by a
    /// fresh token for the connections that come after.
    connections: Mutex<tokio_util::sync::CancellationToken>,
}

/// Locks a mutex, recovering the data if a previous holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    pub(crate) fn new(config: AgentConfig) -> Self {
        let registry = Registry::new(config.ring_bytes, config.max_rings, config.max_ended);
        let log = Feed::new(config.log_ring_bytes, false);
        Self {
            config,
            registry: Mutex::new(registry),
            log: Mutex::new(log),
            connections: Mutex::new(tokio_util::sync::CancellationToken::new()),
        }
    }

    /// The token that ends the connections open now (see [`Shared::end_connections`]).
    pub(crate) fn connections(&self) -> tokio_util::sync::CancellationToken {
        lock(&self.connections).clone()
    }

    /// Ends every open connection and PTY bridge; later connections are unaffected.
    pub(crate) fn end_connections(&self) {
        let old = std::mem::take(&mut *lock(&self.connections));
        old.cancel();
    }

    pub(crate) fn registry(&self) -> MutexGuard<'_, Registry> {
        lock(&self.registry)
    }

    pub(crate) fn log(&self) -> MutexGuard<'_, Feed> {
        lock(&self.log)
    }

    /// Records a chunk read from `process` in the sandbox log (never waits: the log is
    /// a ring that drops its oldest bytes).
    pub(crate) fn log_output(
        &self,
        process: Uuid,
        stream: StreamKind,
        data: Bytes,
        at: SystemTime,
    ) {
        self.log().push(stream, data, at, Some(process));
    }
}
