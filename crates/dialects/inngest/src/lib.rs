//! The Inngest Sandbox REST v2 dialect: every `/v2/sandboxes…` and `/v2/snapshots…`
//! route, translated into one engine operation each and rendered in Inngest's shapes.

/// The name this dialect's aliases (environment names) are kept under.
pub const DIALECT: &str = "inngest";

pub mod duration;
pub mod error;
pub mod extract;
pub mod frames;
#[doc(hidden)]
pub mod fuzzing;
pub mod openapi;
pub mod params;
pub mod render;
mod routes;
pub mod signing_key;
pub mod views;

use axum::routing::{get, post};
use axum::Router;
use sandboxd_engine::Engine;
use std::sync::Arc;

/// What every handler of this dialect shares.
#[derive(Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
}

/// The dialect's routes, with `Cache-Control: no-store` on every response.
pub fn router(engine: Arc<Engine>) -> Router {
    use routes::*;
    let sandbox = "/v2/sandboxes/{sandbox_id}";
    let process = "/v2/sandboxes/{sandbox_id}/processes/{process_id}";
    let routes = Router::new()
        .route(
            "/v2/sandboxes",
            post(sandboxes::create).get(sandboxes::list),
        )
        .route(sandbox, get(sandboxes::get).delete(sandboxes::destroy))
        .route(&format!("{sandbox}/pause"), post(lifecycle::pause))
        .route(&format!("{sandbox}/resume"), post(lifecycle::resume))
        .route(&format!("{sandbox}/exec"), post(exec::exec))
        .route(&format!("{sandbox}/metrics"), get(usage::usage))
        .route(&format!("{sandbox}/logs"), get(output::logs))
        .route(
            &format!("{sandbox}/files"),
            get(files::download).put(files::upload),
        )
        .route(
            &format!("{sandbox}/processes"),
            post(processes::start).get(processes::list),
        )
        .route(process, get(processes::get))
        .route(&format!("{process}/signals"), post(processes::signal))
        .route(&format!("{process}/wait"), post(processes::wait))
        .route(&format!("{process}/output"), get(output::retained))
        .route(&format!("{process}/output/stream"), get(output::stream))
        .route(&format!("{sandbox}/snapshots"), post(snapshots::create))
        .route("/v2/snapshots", get(snapshots::list))
        .route(
            "/v2/snapshots/{snapshot_id}",
            get(snapshots::get).delete(snapshots::delete),
        )
        .method_not_allowed_fallback(routes::method_not_allowed)
        .with_state(AppState { engine });
    sandboxd_dialect_common::no_store(routes)
}
