//! The dialect's error shape `{"error":{"code":…}}` and the one function that maps
//! engine error codes to HTTP statuses and Runzivo codes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_dialect_common::JsonBodyError;
use sandboxd_engine::{EngineError, ErrorCode};
use serde::Serialize;

/// Which family of operation failed: exec and terminal answer their own 503 code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Sandboxes,
    Exec,
}

/// An error response: status, stable code and a human message.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds for a `Retry-After` header (rate and quota refusals).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid bearer token is required",
        )
    }

    pub fn ticket_invalid() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "ticket_invalid",
            "the terminal ticket is expired, used or unknown",
        )
    }

    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }

    /// A route that exists, asked with a method it does not take.
    pub fn method_not_allowed(method: &axum::http::Method) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("this route does not take {method}"),
        )
    }

    pub fn not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "sandbox_not_found",
            "sandbox not found",
        )
    }

    /// A path under this dialect's prefix that names no route.
    pub fn route_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such route")
    }

    /// An engine error of operation family `op`.
    pub fn engine(op: Op, err: EngineError) -> Self {
        let (status, code) = status_and_code(op, err.code);
        if status.is_server_error() {
            tracing::warn!(error = %err, source = ?std::error::Error::source(&err), "request failed");
        }
        let retry_after = err.retry_after_secs();
        let message = match err.state {
            Some((state, reason)) if err.code == ErrorCode::WrongState => format!(
                "the sandbox is {}; this needs a running sandbox",
                crate::views::status_word(state, reason)
            ),
            _ => crate::scrub::without_engine_ids(&err.message),
        };
        let mut api = Self::new(status, code, message);
        api.retry_after = retry_after;
        api
    }
}

/// The one mapping from engine error codes to this dialect's status and code.
pub fn status_and_code(op: Op, code: ErrorCode) -> (StatusCode, &'static str) {
    use ErrorCode::*;
    match code {
        InvalidArgument | NotARegularFile | ImageNotFound | SecretNotFound | FileTooLarge
        | ExecOutputTooLarge => (StatusCode::BAD_REQUEST, "invalid_request"),
        SandboxNotFound | ProcessNotFound | OutputNotRetained | FileNotFound | SnapshotNotFound => {
            (StatusCode::NOT_FOUND, "sandbox_not_found")
        }
        WrongState | NameTaken => (StatusCode::CONFLICT, "sandbox_wrong_state"),
        SessionLimitReached => (StatusCode::CONFLICT, "session_limit_reached"),
        Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        CapacityExhausted => (StatusCode::SERVICE_UNAVAILABLE, "sandboxes_unavailable"),
        QuotaExceeded => (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded"),
        RateLimited => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
        KeyRevoked => (StatusCode::UNAUTHORIZED, "unauthorized"),
        // The spec answers every body problem 400 `invalid_request`.
        RequestBodyTimedOut => (StatusCode::BAD_REQUEST, "invalid_request"),
        // No file operation here; the closest documented answer is 503.
        Unavailable | ExecTimedOut | WaitTimedOut | InsufficientStorage => match op {
            Op::Sandboxes => (StatusCode::SERVICE_UNAVAILABLE, "sandboxes_unavailable"),
            Op::Exec => (StatusCode::SERVICE_UNAVAILABLE, "sandbox_exec_unavailable"),
        },
    }
}

/// Every body problem (media type, size, syntax, shape) is a 400 `invalid_request`:
/// the spec documents no 413 or 415.
impl From<JsonBodyError> for ApiError {
    fn from(err: JsonBodyError) -> Self {
        Self::invalid(err.to_string())
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: Item<'a>,
}

#[derive(Serialize)]
struct Item<'a> {
    code: &'a str,
    message: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Item {
                code: self.code,
                message: &self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
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
    fn maps_the_documented_codes() {
        let map = |op, code| status_and_code(op, code);
        assert_eq!(
            map(Op::Exec, ErrorCode::SessionLimitReached),
            (StatusCode::CONFLICT, "session_limit_reached")
        );
        assert_eq!(
            map(Op::Exec, ErrorCode::WrongState),
            (StatusCode::CONFLICT, "sandbox_wrong_state")
        );
        assert_eq!(
            map(Op::Exec, ErrorCode::Unavailable).1,
            "sandbox_exec_unavailable"
        );
        assert_eq!(
            map(Op::Sandboxes, ErrorCode::Unavailable).1,
            "sandboxes_unavailable"
        );
        assert_eq!(
            map(Op::Sandboxes, ErrorCode::Internal),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal_error")
        );
    }
}
