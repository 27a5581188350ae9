//! A request whose path does not decode to UTF-8 is refused before routing, with 400
//! in the error shape of the dialect its prefix belongs to (the console's under
//! `/console/`): the routes' path extractors refused it in plain text, not in any
//! dialect's shape.

use axum::extract::Request;
use axum::http::header::CACHE_CONTROL;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

const MESSAGE: &str = "the request path does not decode to UTF-8";

pub(crate) async fn require_utf8_path(req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .is_ok()
    {
        return next.run(req).await;
    }
    let mut response = if path.starts_with("/console/") {
        sandboxd_console::invalid_request(MESSAGE)
    } else {
        match crate::observe::dialect_of(path) {
            "runzivo" => {
                sandboxd_dialect_runzivo::error::ApiError::invalid(MESSAGE).into_response()
            }
            "openrelay" => {
                sandboxd_dialect_openrelay::error::ApiError::invalid(MESSAGE).into_response()
            }
            _ => {
                sandboxd_dialect_inngest::error::ApiError::invalid_request(MESSAGE).into_response()
            }
        }
    };
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
