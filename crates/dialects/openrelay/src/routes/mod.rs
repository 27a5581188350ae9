//! Route handlers: each parses, checks the key's permission, calls the engine and renders.

pub mod create;
mod deliver;
pub mod exec;
pub mod sandboxes;
pub mod templates;

use crate::error::ApiError;
use axum::http::HeaderMap;
use uuid::Uuid;

/// How an answer with a command is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Json,
    Ndjson,
}

impl Mode {
    /// `application/x-ndjson` in Accept streams; anything else answers JSON.
    pub fn from_accept(headers: &HeaderMap) -> Mode {
        let accept = headers
            .get(axum::http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        match accept.contains("application/x-ndjson") {
            true => Mode::Ndjson,
            false => Mode::Json,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Json => "json",
            Mode::Ndjson => "ndjson",
        }
    }
}

/// A sandbox id from the path; anything but a UUID names no sandbox.
pub fn sandbox_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::not_found(format!("sandbox {raw:?} not found")))
}
