//! Long-lived or buffered requests in flight per workspace (execs, waits, streams,
//! followed logs, terminals, process lists), so that one workspace cannot hold every
//! connection the server serves;
//! each also watches the API key that opened it, to end when that key is revoked.

use crate::error::{EngineError, ErrorCode};
use crate::revocations::{KeyWatch, Revocations};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How soon a workspace refused for its requests in flight may retry.
const RETRY: Duration = Duration::from_secs(1);

/// Counts of long-lived requests in flight, per workspace, under one cap.
pub(crate) struct InFlight {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    /// Most at once per workspace; 0: no cap.
    max: usize,
    revocations: Revocations,
}

/// One admitted long-lived request of a workspace; frees its place when dropped (the
/// request ended, or its client went away and the stream was dropped).
#[derive(Debug)]
pub struct InFlightSlot {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    workspace: String,
    /// The key of the request (none for the server's own work and `sandboxd run`).
    key: Option<KeyWatch>,
}

impl InFlight {
    pub(crate) fn new(max: u32, revocations: Revocations) -> Self {
        Self {
            counts: Default::default(),
            max: max as usize,
            revocations,
        }
    }

    /// Admits one more long-lived request of `ws`, or `RateLimited` (429 in every
    /// dialect) when it already has the cap in flight; other workspaces are unaffected.
    pub(crate) fn acquire(&self, ws: &str) -> Result<InFlightSlot, EngineError> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(ws.to_owned()).or_insert(0);
        if self.max > 0 && *n >= self.max {
            return Err(EngineError::new(
                ErrorCode::RateLimited,
                format!(
                    "the workspace already has {} long-lived requests (execs, streams, followed \
                     logs, terminals, process lists) in flight; end some or retry shortly",
                    self.max
                ),
            )
            .retry_after(RETRY));
        }
        *n += 1;
        Ok(InFlightSlot {
            counts: self.counts.clone(),
            workspace: ws.to_owned(),
            key: crate::request::current_key().map(|key| self.revocations.watch(key)),
        })
    }

    /// Requests of `ws` in flight now.
    #[cfg(test)]
    fn count(&self, ws: &str) -> usize {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(ws).copied().unwrap_or(0)
    }
}

impl InFlightSlot {
    /// Resolves once the key that opened the request is revoked (never for a request
    /// no key opened).
    pub(crate) async fn revoked(&self) {
        match &self.key {
            Some(key) => key.revoked().await,
            None => std::future::pending().await,
        }
    }

    /// Cancelled once the key that opened the request is revoked.
    pub(crate) fn revocation(&self) -> tokio_util::sync::CancellationToken {
        match &self.key {
            Some(key) => key.token(),
            None => tokio_util::sync::CancellationToken::new(),
        }
    }
}

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.workspace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.workspace);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry over a store of its own, kept in a temporary dir that lives as long.
    fn revocations() -> (tempfile::TempDir, Revocations) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = sandboxd_store::SqliteStore::open(dir.path().join("db")).expect("a store");
        (dir, Revocations::new(Arc::new(store)))
    }

    #[test]
    fn a_workspace_at_its_cap_is_refused_alone_and_freed_on_drop() {
        let (_dir, revocations) = revocations();
        let f = InFlight::new(2, revocations);
        let a = f.acquire("a").unwrap();
        let _b = f.acquire("a").unwrap();
        let err = f.acquire("a").unwrap_err();
        assert_eq!(err.code, ErrorCode::RateLimited);
        assert!(err.retry_after_secs().is_some());
        let _other = f.acquire("b").expect("another workspace is still admitted");
        drop(a);
        let _c = f.acquire("a").expect("a dropped slot is free again");
        assert_eq!(f.count("a"), 2);
    }

    #[test]
    fn zero_is_no_cap_and_counts_do_not_leak() {
        let (_dir, revocations) = revocations();
        let f = InFlight::new(0, revocations);
        let held: Vec<_> = (0..100).map(|_| f.acquire("a").unwrap()).collect();
        assert_eq!(f.count("a"), 100);
        drop(held);
        assert_eq!(f.count("a"), 0);
        assert!(f.counts.lock().unwrap().is_empty());
    }
}
