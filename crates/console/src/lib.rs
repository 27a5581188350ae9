//! The web console at `/console`: hand-written HTML/CSS/JS and a vendored xterm.js
//! embedded in the binary, sign-in by one-time links (`sandboxd console link`), and
//! session-cookie JSON endpoints under `/console/api` that call the engine's operations
//! like a dialect does (no state of its own besides sessions and terminal tickets).

#![forbid(unsafe_code)]

mod api;
mod assets;
mod error;
mod headers;
mod login;
mod session;

use axum::routing::{get, post};
use axum::Router;
use sandboxd_dialect_runzivo::tickets::Tickets;
use sandboxd_engine::Engine;
use std::sync::Arc;

pub use session::{Sessions, COOKIE, CSRF_HEADER, SESSION_TTL};

/// What every console handler shares.
#[derive(Clone)]
pub struct Console {
    pub engine: Arc<Engine>,
    pub sessions: Arc<Sessions>,
    pub tickets: Arc<Tickets>,
}

/// The console's `400 invalid` answer (for a request refused before routing).
pub fn invalid_request(message: &str) -> axum::response::Response {
    axum::response::IntoResponse::into_response(error::ApiError::invalid(message))
}

/// The console's routes, all under `/console`, with its security headers on every
/// response.
pub fn router(engine: Arc<Engine>) -> Router {
    let state = Console {
        engine,
        sessions: Arc::default(),
        tickets: Arc::default(),
    };
    let pages = Router::new()
        .route("/console", get(assets::index))
        .route("/console/", get(assets::index))
        .route("/console/assets/{*file}", get(assets::asset))
        .route("/console/login", get(login::login))
        .route("/console/logout", post(login::logout));
    let routes = pages.merge(api::router(state.clone())).with_state(state);
    headers::secured(routes)
}
