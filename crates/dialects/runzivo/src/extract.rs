//! Request extractors that fail in the dialect's error shape: the sandbox of the
//! path (looked up by its Runzivo ID) and strict JSON bodies.

use crate::error::{ApiError, Op};
use crate::AppState;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use sandboxd_dialect_common::json::{read_json, read_optional_json};
use sandboxd_engine::{Sandbox, WorkspaceId};
use serde::de::DeserializeOwned;
use std::collections::HashMap;

/// `{sandbox_id}` of the path, well-formed (else 400 `invalid_request`).
pub struct SandboxId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for SandboxId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid(e.body_text()))?;
        let id = params.0.get("sandbox_id").cloned().unwrap_or_default();
        if !crate::ids::is_valid(&id) {
            return Err(ApiError::invalid(
                "sandboxId must be sbx_ followed by 24 lowercase hexadecimal characters",
            ));
        }
        Ok(SandboxId(id))
    }
}

impl AppState {
    /// The workspace's sandbox with Runzivo ID `id`, or 404 `sandbox_not_found`.
    pub async fn sandbox(&self, ws: &WorkspaceId, id: &str, op: Op) -> Result<Sandbox, ApiError> {
        self.engine
            .find_by_alias(ws, crate::ids::DIALECT, id)
            .await
            .map_err(|e| ApiError::engine(op, e))?
            .ok_or_else(ApiError::not_found)
    }
}

/// A JSON body of at most `LIMIT` bytes: `application/json`, one value, no unknown fields.
pub struct ApiJson<T, const LIMIT: usize>(pub T);

impl<T: DeserializeOwned, S: Send + Sync, const LIMIT: usize> FromRequest<S> for ApiJson<T, LIMIT> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        Ok(ApiJson(read_json(&parts.headers, body, LIMIT).await?))
    }
}

/// Like [`ApiJson`], but an empty body (without Content-Type) is `None`.
pub struct OptionalJson<T, const LIMIT: usize>(pub Option<T>);

impl<T: DeserializeOwned, S: Send + Sync, const LIMIT: usize> FromRequest<S>
    for OptionalJson<T, LIMIT>
{
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        Ok(OptionalJson(
            read_optional_json(&parts.headers, body, LIMIT).await?,
        ))
    }
}
