//! The sandboxd HTTP server: layered configuration, one axum app that merges every API
//! dialect's router, and a serve loop with graceful shutdown.

mod accept_errors;
pub mod config;
mod listener;
mod metrics_listener;
mod not_found;
pub mod observe;
mod overload;
mod path_utf8;
mod serve;
mod served;
mod trim;
mod waiting;

pub use config::{ConfigError, Isolation, ServerConfig};
pub use serve::{app, app_with, serve, shutdown_signal};
