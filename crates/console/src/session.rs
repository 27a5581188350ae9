//! Console sessions: an opaque token in an HttpOnly, SameSite=Strict cookie scoped to
//! `/console`, kept only as a SHA-256 hash in memory (a restart signs everyone out),
//! bound to one workspace, with a CSRF token that every mutating request must echo.

use crate::error::ApiError;
use crate::Console;
use axum::extract::{Request, State};
use axum::http::header::COOKIE as COOKIE_HEADER;
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sandboxd_engine::{Principal, WorkspaceId, ALL_PERMISSIONS};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The session cookie's name.
pub const COOKIE: &str = "sandboxd_console";
/// The header a mutating request carries its session's CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a session lasts after sign-in.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// A signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    pub workspace: WorkspaceId,
    pub csrf: String,
    /// Who the console acts as: whoever could run `sandboxd console link` on the data
    /// directory holds every permission in that workspace.
    pub principal: Principal,
    expires: Instant,
}

/// The outstanding sessions.
#[derive(Debug, Default)]
pub struct Sessions {
    by_hash: Mutex<HashMap<String, Session>>,
}

fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn random() -> String {
    let part = || uuid::Uuid::new_v4().simple().to_string();
    format!("{}{}", part(), part())
}

impl Sessions {
    /// Starts a session in `workspace`; returns its cookie token.
    pub fn start(&self, workspace: WorkspaceId) -> String {
        let token = random();
        let now = Instant::now();
        let session = Session {
            principal: Principal {
                workspace: Some(workspace.clone()),
                key_id: uuid::Uuid::nil(),
                permissions: vec![ALL_PERMISSIONS.to_owned()],
                scopes: Vec::new(),
            },
            workspace,
            csrf: random(),
            expires: now + SESSION_TTL,
        };
        let mut map = self.by_hash.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, s| s.expires > now);
        map.insert(hash(&token), session);
        token
    }

    /// The live session of `token`.
    pub fn get(&self, token: &str) -> Option<Session> {
        let map = self.by_hash.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&hash(token))
            .filter(|s| s.expires > Instant::now())
            .cloned()
    }

    /// Ends the session of `token`.
    pub fn end(&self, token: &str) {
        let mut map = self.by_hash.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&hash(token));
    }
}

/// The session cookie's value in `headers`.
pub fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|v| !v.is_empty())
}

/// The `Set-Cookie` value of a new session (`None`: the one that ends it).
pub fn set_cookie(token: Option<&str>) -> String {
    match token {
        Some(t) => format!(
            "{COOKIE}={t}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
            SESSION_TTL.as_secs()
        ),
        None => format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"),
    }
}

/// Lets through only requests with a live session (401 otherwise, for every path under
/// `/console/api`, unknown ones included), and mutating ones only with its CSRF token
/// (403). The session goes into the request's extensions.
pub async fn require(State(console): State<Console>, mut req: Request, next: Next) -> Response {
    let Some(session) = cookie_token(req.headers()).and_then(|t| console.sessions.get(t)) else {
        return ApiError::unauthorized().into_response();
    };
    let safe = matches!(*req.method(), Method::GET | Method::HEAD);
    let echoed = req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    if !safe && echoed != Some(session.csrf.as_str()) {
        return ApiError::forbidden("missing or wrong CSRF token").into_response();
    }
    req.extensions_mut().insert(session);
    // What a session does is audited as the console's (it holds no API key).
    sandboxd_engine::request::set_actor("console");
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn sessions_and_cookies() {
        let s = Sessions::default();
        let t = s.start("ws".into());
        assert_eq!(s.get(&t).map(|x| x.workspace), Some("ws".to_owned()));
        assert!(s.get("forged").is_none());
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE_HEADER,
            HeaderValue::from_str(&format!("a=b; {COOKIE}={t}; c=d")).unwrap(),
        );
        assert_eq!(cookie_token(&h), Some(t.as_str()));
        s.end(&t);
        assert!(s.get(&t).is_none());
    }
}
