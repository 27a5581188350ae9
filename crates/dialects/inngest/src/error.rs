//! The dialect's error shape `{"errors":[{code,message}]}` and the one function that maps
//! engine error codes to HTTP statuses and Inngest codes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_dialect_common::JsonBodyError;
use sandboxd_engine::{EngineError, ErrorCode};
use serde::Serialize;

/// Largest JSON request body (Create, Exec, process Start, Signal).
pub const JSON_BODY_LIMIT: usize = 1024 * 1024;

/// One error as the API renders it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ErrorItem {
    pub code: &'static str,
    pub message: String,
}

/// An error response: status plus one error item.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub item: ErrorItem,
    /// Seconds for a `Retry-After` header (rate and quota refusals).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            item: ErrorItem {
                code,
                message: message.into(),
            },
            retry_after: None,
        }
    }

    /// Malformed request: bad JSON, missing field, bad query encoding.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// A field or parameter whose value is out of range or badly formatted.
    pub fn invalid_field(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_field_format", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid API key is required",
        )
    }

    /// A path under this dialect's prefix (or under no dialect's) that names no route.
    pub fn route_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such route")
    }

    /// A path ID that names nothing (including non-canonical UUIDs).
    pub fn not_found(code: ErrorCode) -> Self {
        Self::from(EngineError::new(code, not_found_message(code)))
    }

    /// Engine errors of file routes: a missing sandbox reads as a missing file.
    pub fn for_file(err: EngineError) -> Self {
        match err.code {
            ErrorCode::SandboxNotFound => Self::not_found(ErrorCode::FileNotFound),
            _ => Self::from(err),
        }
    }
}

fn not_found_message(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::ProcessNotFound => "process not found",
        ErrorCode::SnapshotNotFound => "snapshot not found",
        ErrorCode::FileNotFound => "file not found",
        _ => "sandbox not found",
    }
}

/// The one mapping from engine error codes to this dialect's status and code.
pub fn status_and_code(code: ErrorCode) -> (StatusCode, &'static str) {
    use ErrorCode::*;
    match code {
        InvalidArgument => (StatusCode::BAD_REQUEST, "invalid_field_format"),
        NotARegularFile => (StatusCode::BAD_REQUEST, "invalid_field_format"),
        ImageNotFound => (StatusCode::BAD_REQUEST, "invalid_field_format"),
        SecretNotFound => (StatusCode::BAD_REQUEST, "sandbox_secret_not_found"),
        SandboxNotFound => (StatusCode::NOT_FOUND, "sandbox_not_found"),
        ProcessNotFound => (StatusCode::NOT_FOUND, "sandbox_process_not_found"),
        OutputNotRetained => (StatusCode::NOT_FOUND, "sandbox_process_output_not_retained"),
        FileNotFound => (StatusCode::NOT_FOUND, "sandbox_file_not_found"),
        SnapshotNotFound => (StatusCode::NOT_FOUND, "sandbox_snapshot_not_found"),
        WrongState => (StatusCode::CONFLICT, "sandbox_not_running"),
        NameTaken => (StatusCode::CONFLICT, "sandbox_name_taken"),
        SessionLimitReached => (StatusCode::CONFLICT, "sandbox_session_limit_reached"),
        FileTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "sandbox_file_too_large"),
        ExecOutputTooLarge => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "sandbox_exec_output_too_large",
        ),
        ExecTimedOut => (StatusCode::GATEWAY_TIMEOUT, "sandbox_exec_timed_out"),
        WaitTimedOut => (
            StatusCode::GATEWAY_TIMEOUT,
            "sandbox_process_wait_timed_out",
        ),
        QuotaExceeded | RateLimited => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
        CapacityExhausted | Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "compute_unavailable"),
        // Undocumented by the spec, named like its other sandbox_ codes.
        InsufficientStorage => (
            StatusCode::INSUFFICIENT_STORAGE,
            "sandbox_insufficient_storage",
        ),
        Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        KeyRevoked => (StatusCode::UNAUTHORIZED, "unauthorized"),
        RequestBodyTimedOut => (StatusCode::REQUEST_TIMEOUT, "invalid_request"),
    }
}

impl From<EngineError> for ApiError {
    fn from(err: EngineError) -> Self {
        let (status, code) = status_and_code(err.code);
        if status.is_server_error() {
            tracing::warn!(error = %err, source = ?std::error::Error::source(&err), "request failed");
        }
        let retry_after = err.retry_after_secs();
        let mut api = Self::new(status, code, err.message);
        api.retry_after = retry_after;
        api
    }
}

impl From<JsonBodyError> for ApiError {
    fn from(err: JsonBodyError) -> Self {
        let message = err.to_string();
        match err {
            JsonBodyError::UnsupportedMediaType => Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request",
                message,
            ),
            JsonBodyError::TooLarge { .. } => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", message)
            }
            JsonBodyError::TooSlow(_) => {
                let (status, code) = status_and_code(ErrorCode::RequestBodyTimedOut);
                Self::new(status, code, message)
            }
            JsonBodyError::Shape(ref inner) if is_value_error(inner) => {
                Self::invalid_field(message)
            }
            _ => Self::invalid_request(message),
        }
    }
}

/// serde reports wrong types and out-of-range numbers as "invalid type/value/length".
fn is_value_error(err: &serde_json::Error) -> bool {
    let text = err.to_string();
    text.starts_with("invalid type")
        || text.starts_with("invalid value")
        || text.starts_with("invalid length")
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    errors: [&'a ErrorItem; 1],
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(ErrorBody {
                errors: [&self.item],
            }),
        )
            .into_response();
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
    fn maps_the_spec_codes() {
        assert_eq!(
            status_and_code(ErrorCode::ExecTimedOut),
            (StatusCode::GATEWAY_TIMEOUT, "sandbox_exec_timed_out")
        );
        assert_eq!(
            status_and_code(ErrorCode::ExecOutputTooLarge).0,
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(
            status_and_code(ErrorCode::WaitTimedOut).1,
            "sandbox_process_wait_timed_out"
        );
        assert_eq!(
            status_and_code(ErrorCode::OutputNotRetained).1,
            "sandbox_process_output_not_retained"
        );
        assert_eq!(
            status_and_code(ErrorCode::NameTaken),
            (StatusCode::CONFLICT, "sandbox_name_taken")
        );
    }

    #[test]
    fn files_report_missing_sandboxes_as_missing_files() {
        let err = ApiError::for_file(EngineError::new(ErrorCode::SandboxNotFound, "gone"));
        assert_eq!(
            (err.status, err.item.code),
            (StatusCode::NOT_FOUND, "sandbox_file_not_found")
        );
    }
}
