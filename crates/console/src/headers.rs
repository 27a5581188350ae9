//! The console's response headers: a strict Content-Security-Policy, no framing, no
//! sniffing, no referrer, no caching.

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::HeaderValue;
use axum::response::Response;
use axum::Router;

/// Scripts, styles, images and connections only from the console's own origin; no
/// inline script, no framing, no plugins. Inline *styles* are allowed because xterm.js
/// sets its colours and cell sizes through a `<style>` element it makes at run time.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
    img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

/// Adds the headers to every response of `router`, errors included.
pub fn secured<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router.layer(axum::middleware::map_response(
        |mut response: Response| async move {
            let h = response.headers_mut();
            h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
            h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
            h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
            h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
            h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        },
    ))
}
