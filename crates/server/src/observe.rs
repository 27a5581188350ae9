//! Per-request observation: an id for every request (a sane `X-Request-Id` echoed,
//! else a new one) returned in the response header and available to dialects for
//! their error bodies; one structured log line per request; and the HTTP metrics,
//! labelled by dialect, route template (never the path as sent), method and status.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use sandboxd_engine::metrics::HttpLabels;
use sandboxd_engine::request::RequestContext;
use sandboxd_engine::Engine;
use std::sync::Arc;
use std::time::Instant;

/// The header carrying a request's id both ways.
pub const REQUEST_ID: &str = "x-request-id";

/// Longest client-chosen request id that is echoed.
const MAX_ID_LEN: usize = 128;

/// Wraps one request: sets its id and context, then logs and counts it.
pub async fn observe(State(engine): State<Arc<Engine>>, req: Request, next: Next) -> Response {
    let t0 = Instant::now();
    let id = request_id(req.headers());
    let method = method_label(req.method());
    let dialect = dialect_of(req.uri().path());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let ctx = RequestContext::new(id.clone());
    let mut response = ctx.clone().scope(next.run(req)).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    let took = t0.elapsed();
    let status = response.status().as_u16();
    let caller = ctx.caller();
    let workspace = caller
        .as_ref()
        .and_then(|c| c.workspace.clone())
        .unwrap_or_else(|| "-".to_owned());
    let key_id = caller.map_or_else(|| "-".to_owned(), |c| c.key_id.to_string());
    tracing::info!(
        target: "sandboxd::request",
        request_id = %id,
        method,
        route = %route,
        status,
        duration_ms = took.as_secs_f64() * 1e3,
        dialect,
        workspace = %workspace,
        key_id = %key_id,
        "request"
    );
    engine.metrics().http_request(
        HttpLabels {
            dialect,
            route,
            method,
            status,
        },
        took,
    );
    response
}

/// The client's `X-Request-Id` when it is 1 to 128 characters of `[A-Za-z0-9._:-]`
/// and not the request's own API key (which would then be logged), else a new UUID.
fn request_id(headers: &HeaderMap) -> String {
    let key = sandboxd_dialect_common::bearer_token(headers);
    let sane = |v: &str| {
        (1..=MAX_ID_LEN).contains(&v.len())
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
    };
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| sane(v) && Some(*v) != key)
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned)
}

/// The dialect a path belongs to (the same split as the overload answer's and the
/// unknown route's).
pub(crate) fn dialect_of(path: &str) -> &'static str {
    if path.starts_with("/v2/") {
        "inngest"
    } else if path.starts_with("/v1/customer/") {
        "runzivo"
    } else if path.starts_with("/v1/") {
        "openrelay"
    } else {
        "none"
    }
}

/// The method as a label from a closed set.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_id(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(REQUEST_ID, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn sane_ids_are_echoed_others_replaced() {
        assert_eq!(request_id(&with_id("abc-123_x.y:z")), "abc-123_x.y:z");
        for bad in ["", "a b", "<script>", &"x".repeat(129)] {
            let got = request_id(&with_id(bad));
            assert_ne!(got, bad);
            assert!(uuid::Uuid::parse_str(&got).is_ok(), "{got}");
        }
        assert!(uuid::Uuid::parse_str(&request_id(&HeaderMap::new())).is_ok());
        let mut h = with_id("sk_secret_123456");
        h.insert(
            "authorization",
            HeaderValue::from_static("Bearer sk_secret_123456"),
        );
        assert_ne!(request_id(&h), "sk_secret_123456");
    }

    #[test]
    fn dialects_by_path() {
        assert_eq!(dialect_of("/v2/sandboxes"), "inngest");
        assert_eq!(dialect_of("/v1/customer/tenants/t/sandboxes"), "runzivo");
        assert_eq!(dialect_of("/v1/sandboxes"), "openrelay");
        assert_eq!(dialect_of("/etc/passwd"), "none");
    }
}
