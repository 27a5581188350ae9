//! The dialect's error shape `{error, code, permission?, requestId}` and the one function
//! that maps engine error codes to HTTP statuses and OpenRelay codes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_dialect_common::JsonBodyError;
use sandboxd_engine::{EngineError, ErrorCode};
use serde::Serialize;

/// Largest JSON request body.
pub const JSON_BODY_LIMIT: usize = 1024 * 1024;

/// An error as the API renders it (also inside a run's `result.error`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = Error)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// A human-readable message.
    pub error: String,
    /// A stable code, e.g. `INVALID_REQUEST` (see each status).
    #[schema(value_type = String)]
    pub code: &'static str,
    /// The permission the key lacks (`PERMISSION_DENIED`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permission: Option<String>,
    pub request_id: String,
}

/// An error response: status plus body.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
    /// Seconds for a `Retry-After` header (rate and quota refusals).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorBody {
                error: message.into(),
                code,
                permission: None,
                // The request's own id (also its `X-Request-Id`) when served by the
                // server; a fresh one otherwise.
                request_id: sandboxd_engine::request::current_id()
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            },
            retry_after: None,
        }
    }

    /// Malformed or out-of-range input.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
    }

    pub fn unauthenticated() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "a valid API key is required: Authorization: Bearer or_…",
        )
    }

    /// The key lacks `permission`.
    pub fn permission(permission: &str) -> Self {
        let mut e = Self::new(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            format!("this API key lacks the {permission} permission"),
        );
        e.body.permission = Some(permission.to_owned());
        e
    }

    /// The key's legacy scopes allow no sandbox operation (the same in every dialect).
    pub fn scopes(permission: &str) -> Self {
        let mut e = Self::new(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "this API key's scopes do not allow sandbox operations",
        );
        e.body.permission = Some(permission.to_owned());
        e
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    /// A path under this dialect's prefix that names no route.
    pub fn route_not_found() -> Self {
        Self::not_found("no such route")
    }
}

/// A route that exists, asked with a method it does not take.
pub async fn method_not_allowed(method: axum::http::Method) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        format!("this route does not take {method}"),
    )
}

/// The one mapping from engine error codes to this dialect's status and code.
fn status_and_code(code: ErrorCode) -> (StatusCode, &'static str) {
    use ErrorCode::*;
    match code {
        InvalidArgument => (StatusCode::BAD_REQUEST, "INVALID_REQUEST"),
        SandboxNotFound | ProcessNotFound | SnapshotNotFound | FileNotFound => {
            (StatusCode::NOT_FOUND, "NOT_FOUND")
        }
        ImageNotFound => (StatusCode::BAD_REQUEST, "TEMPLATE_NOT_FOUND"),
        SecretNotFound => (StatusCode::BAD_REQUEST, "SECRET_NOT_FOUND"),
        WrongState => (StatusCode::CONFLICT, "INVALID_STATE"),
        NameTaken => (StatusCode::CONFLICT, "ALREADY_EXISTS"),
        OutputNotRetained | NotARegularFile => (StatusCode::CONFLICT, "INVALID_STATE"),
        FileTooLarge | ExecOutputTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "TOO_LARGE"),
        ExecTimedOut | WaitTimedOut => (StatusCode::GATEWAY_TIMEOUT, "TIMEOUT"),
        CapacityExhausted => (StatusCode::SERVICE_UNAVAILABLE, "CAPACITY_EXHAUSTED"),
        QuotaExceeded => (StatusCode::TOO_MANY_REQUESTS, "QUOTA_EXCEEDED"),
        RateLimited => (StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED"),
        KeyRevoked => (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED"),
        RequestBodyTimedOut => (StatusCode::REQUEST_TIMEOUT, "TIMEOUT"),
        // No file operation here; the closest documented answer is 503.
        Unavailable | InsufficientStorage => (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let (status, code) = status_and_code(e.code);
        if status.is_server_error() {
            tracing::warn!(error = ?e, "openrelay request failed");
        }
        let retry_after = e.retry_after_secs();
        let mut api = Self::new(status, code, e.message);
        api.retry_after = retry_after;
        api
    }
}

impl From<JsonBodyError> for ApiError {
    fn from(e: JsonBodyError) -> Self {
        match e {
            JsonBodyError::UnsupportedMediaType => Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UNSUPPORTED_MEDIA_TYPE",
                e.to_string(),
            ),
            JsonBodyError::TooLarge { .. } => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "TOO_LARGE", e.to_string())
            }
            JsonBodyError::TooSlow(slow) => {
                let (status, code) = status_and_code(ErrorCode::RequestBodyTimedOut);
                Self::new(status, code, slow.to_string())
            }
            other => Self::invalid(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_codes_map_once() {
        let e = ApiError::from(EngineError::new(ErrorCode::CapacityExhausted, "full"));
        assert_eq!(
            (e.status.as_u16(), e.body.code),
            (503, "CAPACITY_EXHAUSTED")
        );
        let e = ApiError::from(EngineError::new(ErrorCode::ImageNotFound, "x"));
        assert_eq!(
            (e.status.as_u16(), e.body.code),
            (400, "TEMPLATE_NOT_FOUND")
        );
        let e = ApiError::permission("sandboxes.create");
        let v = serde_json::to_value(&e.body).unwrap();
        assert_eq!(v["permission"], "sandboxes.create");
        assert_eq!(v["code"], "PERMISSION_DENIED");
    }
}
