//! Remembered answers to idempotent requests: kept 24 hours in the store, so a retry
//! after a server restart still gets the first answer. Which answers to keep and how to
//! compare requests is the dialect's business; the engine keeps and expires them, and
//! bounds what one workspace keeps: at most [`MAX_RECORDS_PER_WORKSPACE`] records (its
//! oldest go first) and [`MAX_BYTES_PER_WORKSPACE`] of answers (past it an answer is
//! kept without its body, status [`NOT_KEPT`], so its key is held and never runs
//! twice, but cannot be replayed).

use crate::engine::Engine;
use crate::error::EngineError;
use sandboxd_store::IdempotencyRecord;
use time::OffsetDateTime;

/// How long an answer is kept.
pub const IDEMPOTENCY_TTL: time::Duration = time::Duration::hours(24);

/// Most records one workspace keeps; past it its oldest are removed.
pub const MAX_RECORDS_PER_WORKSPACE: u64 = 10_000;

/// Most bytes of answers one workspace keeps.
pub const MAX_BYTES_PER_WORKSPACE: u64 = 64 << 20;

/// The status of a record kept without its answer (too large, or past the
/// workspace's bytes): the key is held, the answer cannot be replayed.
pub const NOT_KEPT: u16 = 0;

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

    /// Keeps `answer` for `key` in `ws` within the workspace's bounds (see the module);
    /// `None` when the key already holds one, else whether the answer's body was kept.
    pub fn remember(
        &self,
        ws: &str,
        key: &str,
        answer: &Remembered,
    ) -> Result<Option<bool>, EngineError> {
        self.store
            .prune_idempotency(OffsetDateTime::now_utc() - IDEMPOTENCY_TTL)?;
        let rec = IdempotencyRecord {
            key: key.to_owned(),
            workspace: ws.to_owned(),
            request_hash: answer.request_hash.clone(),
            status: answer.status,
            body: answer.body.clone(),
            headers: answer.headers.clone(),
            created_at: answer.created_at,
        };
        Ok(self.store.put_idempotency_bounded(
            &rec,
            MAX_RECORDS_PER_WORKSPACE,
            MAX_BYTES_PER_WORKSPACE,
        )?)
    }
}
