//! Ending what a revoked API key opened: every long-lived request (a followed log or
//! output, a streamed or captured exec, a wait, a file transfer, a terminal) watches the
//! key that authenticated it, and a revoke cancels them all. A revoke can come from any
//! process on the data dir (`sandboxd keys revoke` writes the database), so while any
//! key is watched the server re-reads the watched keys from the store every
//! [`POLL`]; a revoked (or vanished) key's requests end within about that long.

use crate::error::{EngineError, ErrorCode};
use sandboxd_store::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How often the watched keys are re-read while any request of theirs is open.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// The keys of open long-lived requests, each with the token its requests end on.
pub(crate) struct Revocations {
    shared: Arc<Shared>,
}

struct Shared {
    store: Arc<dyn Store>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    keys: HashMap<Uuid, Watched>,
    /// A poll task runs (it stops once no key is watched).
    polling: bool,
}

struct Watched {
    token: CancellationToken,
    holders: usize,
}

/// One request's watch of its key; dropping it ends the watch.
pub(crate) struct KeyWatch {
    shared: Arc<Shared>,
    key: Uuid,
    token: CancellationToken,
}

impl std::fmt::Debug for KeyWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyWatch").field("key", &self.key).finish()
    }
}

/// The error a request ends with when its key is revoked.
pub fn key_revoked() -> EngineError {
    EngineError::new(
        ErrorCode::KeyRevoked,
        "the API key of this request was revoked; it ended here (what it started in the \
         sandbox runs on)",
    )
}

impl Revocations {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Revocations {
            shared: Arc::new(Shared {
                store,
                state: Mutex::default(),
            }),
        }
    }

    /// Watches `key` for one request, starting the poll if none runs (and a Tokio
    /// runtime is there to run it).
    pub(crate) fn watch(&self, key: Uuid) -> KeyWatch {
        let mut state = self.shared.lock();
        let watched = state.keys.entry(key).or_insert_with(|| Watched {
            token: CancellationToken::new(),
            holders: 0,
        });
        watched.holders += 1;
        let token = watched.token.clone();
        if !state.polling {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                state.polling = true;
                runtime.spawn(poll(Arc::downgrade(&self.shared)));
            }
        }
        KeyWatch {
            shared: self.shared.clone(),
            key,
            token,
        }
    }

    #[cfg(test)]
    fn watched(&self) -> usize {
        self.shared.lock().keys.len()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn revoke(&self, key: Uuid) {
        if let Some(watched) = self.lock().keys.remove(&key) {
            tracing::info!(key = %key, requests = watched.holders, "API key revoked: ending its open requests");
            watched.token.cancel();
        }
    }
}

/// Re-reads the watched keys every [`POLL`] until none is watched.
async fn poll(shared: Weak<Shared>) {
    loop {
        tokio::time::sleep(POLL).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let keys: Vec<Uuid> = {
            let mut state = shared.lock();
            if state.keys.is_empty() {
                state.polling = false;
                return;
            }
            state.keys.keys().copied().collect()
        };
        let store = shared.store.clone();
        let revoked = tokio::task::spawn_blocking(move || {
            keys.into_iter()
                .filter(|key| match store.key_by_id(*key) {
                    Ok(Some(record)) => record.revoked_at.is_some(),
                    Ok(None) => true,
                    Err(e) => {
                        // Read again next round; a busy database delays the ending only.
                        tracing::warn!(key = %key, error = %e, "cannot re-read an API key");
                        false
                    }
                })
                .collect::<Vec<_>>()
        })
        .await;
        for key in revoked.unwrap_or_default() {
            shared.revoke(key);
        }
    }
}

impl KeyWatch {
    /// Resolves once the key is revoked.
    pub(crate) async fn revoked(&self) {
        self.token.cancelled().await
    }

    /// The token cancelled when the key is revoked.
    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        // A cancelled token's entry is gone already (a revoke removes it); a later
        // entry for the same key is another request's.
        if self.token.is_cancelled() {
            return;
        }
        let mut state = self.shared.lock();
        if let Some(watched) = state.keys.get_mut(&self.key) {
            watched.holders = watched.holders.saturating_sub(1);
            if watched.holders == 0 {
                state.keys.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_store::{ApiKeyRecord, SqliteStore};
    use time::OffsetDateTime;

    fn store_with_key() -> (tempfile::TempDir, Arc<dyn Store>, Uuid) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
        let id = Uuid::new_v4();
        store
            .insert_key(&ApiKeyRecord {
                id,
                key_hash: "h".into(),
                prefix: "p".into(),
                workspace: None,
                permissions: vec!["*".into()],
                scopes: vec![],
                created_at: OffsetDateTime::now_utc(),
                revoked_at: None,
                master: false,
                alias_of: None,
            })
            .unwrap();
        (dir, store, id)
    }

    #[tokio::test]
    async fn a_revoke_in_the_store_ends_every_watch_of_the_key_and_only_those() {
        let (_dir, store, key) = store_with_key();
        let r = Revocations::new(store.clone());
        let a = r.watch(key);
        let b = r.watch(key);
        let other = r.watch(Uuid::new_v4()); // unknown to the store: as revoked
        assert_eq!(r.watched(), 2);
        store.revoke_key(key, OffsetDateTime::now_utc()).unwrap();
        a.revoked().await;
        b.revoked().await;
        other.revoked().await;
        assert_eq!(r.watched(), 0);
        drop((a, b, other));
        let c = r.watch(key);
        assert!(!c.token.is_cancelled(), "a new watch starts uncancelled");
        drop(c);
        assert_eq!(r.watched(), 0, "dropped watches leave nothing");
    }

    #[tokio::test]
    async fn an_unrevoked_key_is_left_alone_and_dropping_unwatches() {
        let (_dir, store, key) = store_with_key();
        let r = Revocations::new(store.clone());
        let a = r.watch(key);
        tokio::time::sleep(POLL * 3).await;
        assert!(!a.token.is_cancelled());
        drop(a);
        assert_eq!(r.watched(), 0);
        let b = r.watch(key);
        store.revoke_key(key, OffsetDateTime::now_utc()).unwrap();
        b.revoked().await;
    }
}
