//! The answer to a path no route names: 404 in the error shape of the dialect its prefix
//! belongs to (the split the request log uses), Inngest's for a path under none.

use axum::http::header::CACHE_CONTROL;
use axum::http::{HeaderValue, Uri};
use axum::response::{IntoResponse, Response};

/// The fallback of the whole app; marked `Cache-Control: no-store` like every dialect answer.
pub async fn not_found(uri: Uri) -> Response {
    let mut response = match crate::observe::dialect_of(uri.path()) {
        "runzivo" => sandboxd_dialect_runzivo::error::ApiError::route_not_found().into_response(),
        "openrelay" => {
            sandboxd_dialect_openrelay::error::ApiError::route_not_found().into_response()
        }
        _ => sandboxd_dialect_inngest::error::ApiError::route_not_found().into_response(),
    };
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
