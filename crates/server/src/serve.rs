//! Binding, serving and graceful shutdown. Stopping the server leaves sandboxes running:
//! the engine re-adopts them on the next start.

use crate::config::ServerConfig;
use anyhow::Context;
use axum::serve::ListenerExt;
use axum::Router;
use sandboxd_engine::Engine;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// One router serving every dialect, with default options.
pub fn app(engine: Arc<Engine>) -> Router {
    app_with(engine, &ServerConfig::default())
}

/// One router serving every dialect, tuned by `config`.
pub fn app_with(engine: Arc<Engine>, config: &ServerConfig) -> Router {
    let runzivo = sandboxd_dialect_runzivo::Options {
        exec_kill_grace: std::time::Duration::from_secs(config.exec_kill_grace_seconds),
    };
    Router::new()
        .merge(sandboxd_dialect_inngest::router(engine.clone()))
        .merge(sandboxd_dialect_openrelay::router(engine.clone()))
        .merge(sandboxd_dialect_runzivo::router(engine, runzivo))
}

/// Serves the API on `config.listen` until `shutdown` completes, then lets in-flight
/// requests finish. Logs `listening on ADDR` (the bound address) once it accepts.
pub async fn serve(
    config: ServerConfig,
    engine: Arc<Engine>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    if let Some(key) = &config.master_key {
        engine
            .ensure_master_key(key)
            .context("cannot register the master key")?;
        if let Some(sdk_form) = sandboxd_dialect_inngest::signing_key::sdk_bearer_for(key) {
            engine
                .ensure_master_key(&sdk_form)
                .context("cannot register the master key's Inngest SDK form")?;
        }
    } else {
        tracing::warn!("no master key configured: only keys already in the store are accepted");
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener
        .local_addr()
        .context("cannot read the bound address")?;
    tracing::info!("listening on {addr}");
    // Answers are small and latency-bound: no Nagle delay behind a client's delayed ACK.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
    });
    // Shutdown: new connections stop, open streams end with their terminal frame, and
    // what is still open after the grace period (or a second signal) is cut off.
    let grace = std::time::Duration::from_secs(config.shutdown_grace_seconds);
    let (began, begun) = tokio::sync::oneshot::channel();
    let stopping = engine.clone();
    let graceful = async move {
        shutdown.await;
        stopping.begin_shutdown();
        let _ = began.send(());
    };
    let server = axum::serve(listener, app_with(engine, &config)).with_graceful_shutdown(graceful);
    tokio::select! {
        served = std::future::IntoFuture::into_future(server) => {
            served.context("the HTTP server failed")?;
        }
        () = drain_limit(begun, grace) => {}
    }
    tracing::info!("stopped; sandboxes keep running");
    Ok(())
}

/// Completes `grace` after shutdown `begun`, or at a second signal, whichever is first;
/// never if shutdown does not begin.
async fn drain_limit(begun: tokio::sync::oneshot::Receiver<()>, grace: std::time::Duration) {
    if begun.await.is_err() {
        return std::future::pending().await;
    }
    tokio::select! {
        () = tokio::time::sleep(grace) => {
            tracing::warn!(?grace, "shutdown grace period over; closing what is still open");
        }
        () = shutdown_signal() => tracing::warn!("second signal; stopping at once"),
    }
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot install signal handlers; stop the server with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
    }
}
