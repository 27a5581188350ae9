//! The console API's errors: `{"error":{"code","message"}}` with an HTTP status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_engine::{EngineError, ErrorCode};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "sign in with a link from `sandboxd console link`",
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn engine(e: EngineError) -> Self {
        let status = match e.code {
            ErrorCode::InvalidArgument | ErrorCode::NotARegularFile => StatusCode::BAD_REQUEST,
            ErrorCode::SandboxNotFound
            | ErrorCode::ProcessNotFound
            | ErrorCode::FileNotFound
            | ErrorCode::SnapshotNotFound
            | ErrorCode::ImageNotFound
            | ErrorCode::SecretNotFound => StatusCode::NOT_FOUND,
            ErrorCode::WrongState | ErrorCode::NameTaken => StatusCode::CONFLICT,
            ErrorCode::OutputNotRetained => StatusCode::GONE,
            ErrorCode::FileTooLarge | ErrorCode::ExecOutputTooLarge => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ErrorCode::ExecTimedOut | ErrorCode::WaitTimedOut => StatusCode::REQUEST_TIMEOUT,
            ErrorCode::SessionLimitReached | ErrorCode::QuotaExceeded | ErrorCode::RateLimited => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ErrorCode::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::CapacityExhausted | ErrorCode::Unavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::KeyRevoked => StatusCode::UNAUTHORIZED,
            ErrorCode::RequestBodyTimedOut => StatusCode::REQUEST_TIMEOUT,
        };
        if status.is_server_error() {
            tracing::warn!(error = %e, "console request failed");
        }
        Self::new(status, e.code.as_str(), e.message)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        Self::engine(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}
