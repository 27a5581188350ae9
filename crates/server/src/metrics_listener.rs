//! The Prometheus listener: `GET /metrics` on its own address (`metrics_listen`), apart
//! from the API so that it can stay on loopback or a private network. The Prometheus
//! text format 0.0.4 by default, OpenMetrics text when the scraper's `Accept` asks.

use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use sandboxd_engine::metrics::Format;
use sandboxd_engine::Engine;
use std::net::SocketAddr;
use std::sync::Arc;

/// Binds `addr` and serves the engine's metrics there in the background. A failure to
/// bind is logged: the API is served without metrics rather than not at all.
pub async fn spawn(addr: SocketAddr, engine: Arc<Engine>) {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot serve metrics on {addr}; serving without them");
            return;
        }
    };
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!("metrics at http://{bound}/metrics");
    let app = Router::new().route(
        "/metrics",
        get(move |headers: axum::http::HeaderMap| {
            let engine = engine.clone();
            async move {
                let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok());
                let format = Format::from_accept(accept);
                let (text, kind) = engine.render_metrics(format).await;
                ([(CONTENT_TYPE, kind)], text).into_response()
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
}
