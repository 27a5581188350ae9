//! The console's files, embedded at build time: the page, its script and style, and
//! xterm.js (vendored from npm's `@xterm/xterm`, MIT, see `assets/vendor/xterm/`).

use crate::error::ApiError;
use axum::extract::Path;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};

/// (name, content type, bytes)
const FILES: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../assets/app.css"),
    ),
    (
        "xterm.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/vendor/xterm/xterm.js"),
    ),
    (
        "xterm.css",
        "text/css; charset=utf-8",
        include_str!("../assets/vendor/xterm/xterm.css"),
    ),
];

const INDEX: &str = include_str!("../assets/index.html");

/// The single page; its script routes by the URL's fragment (`#/sandboxes/…`).
pub async fn index() -> Response {
    ([(CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response()
}

pub async fn asset(Path(file): Path<String>) -> Response {
    match FILES.iter().find(|(name, _, _)| *name == file) {
        Some((_, kind, body)) => ([(CONTENT_TYPE, *kind)], *body).into_response(),
        None => ApiError::not_found("no such file").into_response(),
    }
}
