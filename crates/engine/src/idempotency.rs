//! Remembered answers to idempotent requests: kept 24 hours in the store, so a retry
//! after a server restart still gets the first answer. Which answers to keep and how to
//! compare requests is the dialect's business; the engine keeps and expires them.

use crate::engine::Engine;
use crate::error::EngineError;
use sandboxd_store::IdempotencyRecord;
use time::OffsetDateTime;

/// How long an answer is kept.
pub const IDEMPOTENCY_TTL: time::Duration = time::Duration::hours(24);

/// A kept answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    /// The dialect's hash of the request it answers.
    pub request_hash: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub created_at: OffsetDateTime,
}

impl Engine {
    /// The answer kept for `key` in `ws`, if one younger than 24 hours exists.
    pub fn remembered(&self, ws: &str, key: &str) -> Result<Option<Remembered>, EngineError> {
        self.store
            .prune_idempotency(OffsetDateTime::now_utc() - IDEMPOTENCY_TTL)?;
        Ok(self.store.get_idempotency(ws, key)?.map(|r| Remembered {
            request_hash: r.request_hash,
            status: r.status,
            headers: r.headers,
            body: r.body,
            created_at: r.created_at,
        }))
    }

    /// Keeps `answer` for `key` in `ws`; false when the key already holds one.
    pub fn remember(&self, ws: &str, key: &str, answer: &Remembered) -> Result<bool, EngineError> {
        self.store
            .prune_idempotency(OffsetDateTime::now_utc() - IDEMPOTENCY_TTL)?;
        Ok(self.store.put_idempotency(&IdempotencyRecord {
            key: key.to_owned(),
            workspace: ws.to_owned(),
            request_hash: answer.request_hash.clone(),
            status: answer.status,
            body: answer.body.clone(),
            headers: answer.headers.clone(),
            created_at: answer.created_at,
        })?)
    }
}
