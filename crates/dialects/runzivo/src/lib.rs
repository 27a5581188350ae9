//! The Runzivo agent sandboxes v1 dialect: tenant-scoped `/v1/customer/tenants/{tenantId}
//! /sandboxes…` routes (create, get, list, delete, streamed exec, terminal), translated
//! into engine operations and rendered in Runzivo's `{"error":{"code"}}` shapes.

pub mod auth;
pub mod error;
pub mod exec_request;
pub mod extract;
#[doc(hidden)]
pub mod fuzzing;
pub mod ids;
pub mod openapi;
mod routes;
mod scrub;
pub mod tickets;
pub mod views;

pub use routes::terminal::bounded as terminal_upgrade;
pub use routes::terminal::bridge as terminal_bridge;

use axum::routing::{get, post};
use axum::Router;
use sandboxd_engine::Engine;
use std::sync::Arc;
use std::time::Duration;

/// Tunables of the dialect (from the server configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// How long a timed-out command may run after its SIGTERM before it is killed.
    pub exec_kill_grace: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            exec_kill_grace: Duration::from_secs(30),
        }
    }
}

/// What every handler of this dialect shares.
#[derive(Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    pub options: Options,
    pub tickets: Arc<tickets::Tickets>,
}

/// The dialect's routes, with `Cache-Control: no-store` on every response.
pub fn router(engine: Arc<Engine>, options: Options) -> Router {
    use routes::*;
    let sandboxes = "/v1/customer/tenants/{tenant_id}/sandboxes";
    let sandbox = format!("{sandboxes}/{{sandbox_id}}");
    let routes = Router::new()
        .route(sandboxes, post(sandboxes::create).get(sandboxes::list))
        .route(&sandbox, get(sandboxes::get).delete(sandboxes::delete))
        .route(&format!("{sandbox}/exec"), post(exec::exec))
        .route(&format!("{sandbox}/metrics"), get(usage::usage))
        .route(&format!("{sandbox}/terminal"), get(terminal::terminal))
        .route(
            &format!("{sandbox}/terminal/tickets"),
            post(terminal::ticket),
        )
        .method_not_allowed_fallback(|method: axum::http::Method| async move {
            error::ApiError::method_not_allowed(&method)
        })
        .with_state(AppState {
            engine,
            options,
            tickets: Arc::default(),
        });
    sandboxd_dialect_common::no_store(routes)
}
