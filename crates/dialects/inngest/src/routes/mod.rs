//! Handlers, one file per resource group; each parses, validates, calls one engine
//! operation and renders.

pub mod exec;
pub mod files;
pub mod lifecycle;
pub mod output;
pub mod processes;
pub mod sandboxes;
pub mod snapshots;
pub mod usage;

use crate::error::ApiError;
use axum::http::StatusCode;

/// A route that exists, asked with a method it does not take.
pub async fn method_not_allowed(method: axum::http::Method) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("this route does not take {method}"),
    )
}
