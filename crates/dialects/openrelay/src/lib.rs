//! The OpenRelay sandboxes v1 dialect: `/v1/sandboxes…` and `/v1/sandbox-templates`,
//! translated into engine operations and rendered in OpenRelay's shapes. See README.md.

pub mod auth;
pub mod body;
pub mod error;
pub mod events;
pub mod idempotency;
pub mod meta;
pub mod network;
pub mod openapi;
mod routes;
pub mod run;
pub mod views;

use axum::routing::{get, post};
use axum::Router;
use sandboxd_engine::{Engine, WorkspaceId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Idempotency keys whose first request is still running: (workspace, key) → hash.
pub type InFlight = Arc<Mutex<HashMap<(WorkspaceId, String), String>>>;

/// What every handler of this dialect shares.
#[derive(Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    pub inflight: InFlight,
}

/// The dialect's routes, with `Cache-Control: no-store` on every response.
pub fn router(engine: Arc<Engine>) -> Router {
    use routes::*;
    let sandbox = "/v1/sandboxes/{sandbox_id}";
    let routes = Router::new()
        .route("/v1/sandboxes", post(create::create).get(sandboxes::list))
        .route(sandbox, get(sandboxes::get).delete(sandboxes::delete))
        .route(&format!("{sandbox}/pause"), post(sandboxes::pause))
        .route(&format!("{sandbox}/resume"), post(sandboxes::resume))
        .route(&format!("{sandbox}/exec"), post(exec::exec))
        .route(&format!("{sandbox}/metrics"), get(sandboxes::usage))
        .route(
            "/v1/sandbox-templates",
            get(templates::list).post(templates::build),
        )
        .route(
            "/v1/sandbox-templates/{template_id}",
            axum::routing::delete(templates::delete),
        )
        .method_not_allowed_fallback(error::method_not_allowed)
        .with_state(AppState {
            engine,
            inflight: Default::default(),
        });
    sandboxd_dialect_common::no_store(routes)
}
