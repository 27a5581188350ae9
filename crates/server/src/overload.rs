//! The answer to a request that finds the server at its connection cap: 503 with
//! `Retry-After`, in the error shape of the dialect its path belongs to.

use axum::response::{IntoResponse, Response};
use sandboxd_engine::{EngineError, ErrorCode};
use std::time::Duration;

/// What a client is told to wait before it tries again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The 503 for a request to `path` refused at the connection cap.
pub fn overloaded(path: &str) -> Response {
    let err = || {
        EngineError::new(
            ErrorCode::Unavailable,
            "the server is at its connection limit; retry shortly",
        )
        .retry_after(RETRY_AFTER)
    };
    if path.starts_with("/v2/") {
        sandboxd_dialect_inngest::error::ApiError::from(err()).into_response()
    } else if path.starts_with("/v1/customer/") {
        use sandboxd_dialect_runzivo::error::{ApiError, Op};
        ApiError::engine(Op::Sandboxes, err()).into_response()
    } else {
        sandboxd_dialect_openrelay::error::ApiError::from(err()).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_gets_a_503_with_retry_after() {
        for path in [
            "/v2/sandboxes",
            "/v1/sandboxes",
            "/v1/customer/tenants/t/sandboxes",
        ] {
            let r = overloaded(path);
            assert_eq!(r.status(), 503, "{path}");
            assert_eq!(r.headers()["retry-after"], "1", "{path}");
        }
    }
}
