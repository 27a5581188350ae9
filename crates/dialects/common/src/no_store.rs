//! A layer that marks every response `Cache-Control: no-store`.

use axum::http::{header::CACHE_CONTROL, HeaderValue};
use axum::response::Response;
use axum::Router;

/// Adds `Cache-Control: no-store` to every response of `router`, errors included.
pub fn no_store<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router.layer(axum::middleware::map_response(
        |mut response: Response| async move {
            response
                .headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        },
    ))
}
