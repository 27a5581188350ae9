//! `Idempotency-Key` on create: the header's checks, the request hash (decoded fields:
//! whitespace and key order do not count), in-flight detection, replay with
//! `Idempotent-Replayed: true`, and `X-Resume-From` for replayed streams.

use crate::error::ApiError;
use crate::events::resume_after;
use crate::AppState;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use sandboxd_engine::{Remembered, WorkspaceId};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

pub const KEY_HEADER: &str = "idempotency-key";
pub const RESUME_HEADER: &str = "x-resume-from";
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
pub const MAX_KEY_BYTES: usize = 512;
/// A 2xx answer larger than this is not kept; the key is held without it (409
/// `IDEMPOTENT_ANSWER_NOT_KEPT` on a replay). The engine also bounds what a workspace
/// keeps in all (past it, answers are held the same way).
pub const MAX_KEPT_BYTES: usize = 1024 * 1024;
/// Status stored for a key held without its answer.
const HELD: u16 = sandboxd_engine::idempotency::NOT_KEPT;

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "INVALID_IDEMPOTENCY_KEY", message)
}

/// The request's key (as hex of its bytes, so any byte is kept exactly), if it has one.
pub fn key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(KEY_HEADER) else {
        return Ok(None);
    };
    let n = v.as_bytes().len();
    if !(1..=MAX_KEY_BYTES).contains(&n) {
        return Err(bad(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_BYTES} bytes, not {n}"
        )));
    }
    Ok(Some(hex::encode(v.as_bytes())))
}

/// `X-Resume-From`: a non-negative integer.
pub fn resume_from(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(v) = headers.get(RESUME_HEADER) else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| ApiError::invalid("X-Resume-From must be an integer of at least 0"))
}

/// Hash of the decoded request (serde_json maps are sorted, so key order is gone).
pub fn request_hash(mode: &str, value: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    h.update(mode.as_bytes());
    h.update(b"\n");
    h.update(value.to_string().as_bytes());
    hex::encode(h.finalize())
}

/// A first request holding its key until it finishes (dropping it releases the key).
pub struct Ticket {
    state: AppState,
    ws: WorkspaceId,
    key: String,
    hash: String,
}

/// What to do with a request that carries a key.
pub enum Begin {
    Run(Ticket),
    Replay(Response),
}

fn in_use() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "IDEMPOTENCY_KEY_IN_USE",
        "a request with this Idempotency-Key is still running; repeat it a second later",
    )
}

fn not_kept() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "IDEMPOTENT_ANSWER_NOT_KEPT",
        format!(
            "the request with this Idempotency-Key succeeded, but its answer was too large \
             to keep (over {} MiB, or past the workspace's room for kept answers) and \
             cannot be replayed; look the result up (e.g. list the sandboxes) instead of \
             repeating the request",
            MAX_KEPT_BYTES >> 20
        ),
    )
}

fn reused() -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "IDEMPOTENCY_KEY_REUSED",
        "this Idempotency-Key was used with a different request body",
    )
}

/// Checks `key` (scoped to `op`) for `hash`: a new request runs, a kept answer is
/// replayed, a running one is 409 and another body is 422.
pub fn begin(
    state: &AppState,
    ws: &WorkspaceId,
    op: &str,
    key: &str,
    hash: String,
    resume: Option<u64>,
) -> Result<Begin, ApiError> {
    let key = format!("{op}:{key}");
    let mut running = state.inflight.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(h) = running.get(&(ws.clone(), key.clone())) {
        return Err(if *h == hash { in_use() } else { reused() });
    }
    if let Some(kept) = state.engine.remembered(ws, &key)? {
        return match (kept.request_hash == hash, kept.status) {
            (false, _) => Err(reused()),
            (true, HELD) => Err(not_kept()),
            (true, _) => Ok(Begin::Replay(replay(kept, resume))),
        };
    }
    running.insert((ws.clone(), key.clone()), hash.clone());
    Ok(Begin::Run(Ticket {
        state: state.clone(),
        ws: ws.clone(),
        key,
        hash,
    }))
}

fn replay(kept: Remembered, resume: Option<u64>) -> Response {
    let ndjson = kept.headers.iter().any(|(_, v)| v.contains("ndjson"));
    let body = match (ndjson, resume) {
        (true, Some(after)) => resume_after(&kept.body, after),
        _ => kept.body,
    };
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK);
    for (k, v) in &kept.headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp.headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    resp
}

impl Ticket {
    /// Keeps a 2xx answer for 24 hours (a too large one holds the key without it);
    /// anything else is forgotten so a retry runs again.
    pub fn finish(self, status: StatusCode, content_type: &str, body: &[u8]) {
        if !status.is_success() {
            return;
        }
        let big = body.len() > MAX_KEPT_BYTES;
        let answer = Remembered {
            request_hash: self.hash.clone(),
            status: if big { HELD } else { status.as_u16() },
            headers: vec![("content-type".into(), content_type.into())],
            body: if big { Vec::new() } else { body.to_vec() },
            created_at: OffsetDateTime::now_utc(),
        };
        match self.state.engine.remember(&self.ws, &self.key, &answer) {
            Ok(Some(false)) if !big => {
                tracing::info!(workspace = %self.ws, "idempotent answer held without its body: the workspace keeps its most")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot keep an idempotent answer"),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut running = self
            .state
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        running.remove(&(self.ws.clone(), self.key.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_bounds_and_resume_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(key(&h).unwrap(), None);
        h.insert(KEY_HEADER, HeaderValue::from_static(""));
        assert!(key(&h).is_err());
        h.insert(KEY_HEADER, HeaderValue::from_str(&"k".repeat(512)).unwrap());
        assert!(key(&h).unwrap().is_some());
        h.insert(KEY_HEADER, HeaderValue::from_str(&"k".repeat(513)).unwrap());
        assert!(key(&h).is_err());
        h.insert(RESUME_HEADER, HeaderValue::from_static("-1"));
        assert!(resume_from(&h).is_err());
        h.insert(RESUME_HEADER, HeaderValue::from_static("0"));
        assert_eq!(resume_from(&h).unwrap(), Some(0));
    }

    #[test]
    fn hashes_ignore_whitespace_and_key_order() {
        let a: serde_json::Value = serde_json::from_str(r#"{"a":1, "b":{"c":2,"d":3}}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{ "b":{"d":3,"c":2},"a":1}"#).unwrap();
        assert_eq!(request_hash("json", &a), request_hash("json", &b));
        assert_ne!(request_hash("json", &a), request_hash("ndjson", &a));
    }
}
