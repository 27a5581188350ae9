//! Request extractors that fail in the dialect's error shape: the authenticated
//! workspace, strict JSON bodies and query strings.

use crate::error::{ApiError, JSON_BODY_LIMIT};
use crate::params::path_id;
use crate::AppState;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use sandboxd_dialect_common::{bearer_token, read_json};
use sandboxd_engine::{AccessDenied, ErrorCode, SandboxAccess, WorkspaceId};
use serde::de::DeserializeOwned;
use uuid::Uuid;

/// Header naming the environment when the key is account-scoped.
pub const ENV_HEADER: &str = "x-inngest-env";
/// The key permission sandbox routes need.
pub const PERMISSION: &str = "sandboxes";

/// The workspace the request's API key (and `X-Inngest-Env`) selects.
pub struct Workspace(pub WorkspaceId);

impl FromRequestParts<AppState> for Workspace {
    type Rejection = ApiError;

    /// A workspace-scoped key selects its workspace (any `X-Inngest-Env` is ignored, as
    /// the SDK may send one derived from its environment). An account-scoped key must
    /// name an environment with `X-Inngest-Env`; a missing header or one matching no
    /// environment is 400 `invalid_request`. Environment names are unique per store
    /// (`sandboxd keys create --inngest-env` refuses a taken one), so a header can never
    /// match more than one environment.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let key = bearer_token(&parts.headers).ok_or_else(ApiError::unauthorized)?;
        let principal = state
            .engine
            .authenticate(key)?
            .ok_or_else(ApiError::unauthorized)?;
        let workspace = match principal.workspace.clone() {
            Some(own) => own,
            None => account_workspace(state, &parts.headers)?,
        };
        // The engine's access level first (the same for a key in every dialect): a
        // GET only reads, every other method changes something.
        let needed = match parts.method {
            axum::http::Method::GET | axum::http::Method::HEAD => SandboxAccess::Read,
            _ => SandboxAccess::Write,
        };
        let level = principal.require_access(needed);
        if let Err(AccessDenied::Scopes) = level {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "access_denied",
                "this API key's scopes do not allow sandbox operations",
            ));
        }
        let permitted = level.is_ok() && principal.allows(PERMISSION);
        if !principal.can_use(&workspace) || !permitted {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "access_denied",
                "sandbox access is not enabled for this key",
            ));
        }
        Ok(Workspace(workspace))
    }
}

/// The workspace an account-scoped key's `X-Inngest-Env` names.
fn account_workspace(state: &AppState, headers: &HeaderMap) -> Result<WorkspaceId, ApiError> {
    let env = match headers.get(ENV_HEADER).map(|v| v.to_str()) {
        None => {
            return Err(ApiError::invalid_request(
                "an account-scoped API key needs the X-Inngest-Env header",
            ))
        }
        Some(Err(_)) => {
            return Err(ApiError::invalid_request(
                "X-Inngest-Env must be visible ASCII",
            ))
        }
        Some(Ok(env)) => env.trim(),
    };
    if env.is_empty() {
        return Err(ApiError::invalid_request("X-Inngest-Env must not be empty"));
    }
    match state.engine.workspace_by_alias(crate::DIALECT, env)? {
        Some(found) => Ok(found.id),
        None => Err(ApiError::invalid_request(format!(
            "X-Inngest-Env {env:?} does not match an environment"
        ))),
    }
}

/// A JSON body: `application/json`, at most 1 MiB, one value, no unknown fields.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        Ok(ApiJson(
            read_json(&parts.headers, body, JSON_BODY_LIMIT).await?,
        ))
    }
}

/// A query string; malformed encoding is an `invalid_request`.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(ApiQuery(value)),
            Err(rejection) => Err(ApiError::invalid_request(rejection.body_text())),
        }
    }
}

/// `{sandbox_id}` of the path; a non-canonical ID is `sandbox_not_found`.
pub struct SandboxPath(pub Uuid);

/// `{sandbox_id}/processes/{process_id}` of the path.
pub struct ProcessPath(pub Uuid, pub Uuid);

/// `{snapshot_id}` of the path; a non-canonical ID is `sandbox_snapshot_not_found`.
pub struct SnapshotPath(pub Uuid);

async fn path_params<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
) -> Result<Vec<String>, ApiError> {
    match Path::<Vec<(String, String)>>::from_request_parts(parts, state).await {
        Ok(Path(params)) => Ok(params.into_iter().map(|(_, v)| v).collect()),
        Err(rejection) => Err(ApiError::invalid_request(rejection.body_text())),
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SandboxPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = path_params(parts, state).await?;
        let raw = params.first().map(String::as_str).unwrap_or("");
        Ok(SandboxPath(path_id(raw, ErrorCode::SandboxNotFound)?))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ProcessPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = path_params(parts, state).await?;
        let raw = |i: usize| params.get(i).map(String::as_str).unwrap_or("");
        Ok(ProcessPath(
            path_id(raw(0), ErrorCode::SandboxNotFound)?,
            path_id(raw(1), ErrorCode::ProcessNotFound)?,
        ))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SnapshotPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = path_params(parts, state).await?;
        let raw = params.first().map(String::as_str).unwrap_or("");
        Ok(SnapshotPath(path_id(raw, ErrorCode::SnapshotNotFound)?))
    }
}
