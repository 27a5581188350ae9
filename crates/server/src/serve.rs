//! Binding, serving and graceful shutdown. Stopping the server leaves sandboxes running:
//! the engine re-adopts them on the next start.

use crate::config::ServerConfig;
use anyhow::Context;
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
        .merge(sandboxd_dialect_runzivo::router(engine.clone(), runzivo))
        .merge(sandboxd_console::router(engine.clone()))
        .fallback(crate::not_found::not_found)
        .layer(axum::middleware::from_fn(
            crate::path_utf8::require_utf8_path,
        ))
        .layer(axum::middleware::from_fn_with_state(
            engine,
            crate::observe::observe,
        ))
}

/// Serves the API on `config.listen` until `shutdown` completes, then lets in-flight
/// requests finish. Logs `listening on ADDR` (the bound address) once it accepts.
pub async fn serve(
    config: ServerConfig,
    engine: Arc<Engine>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    register_master_key(&engine, config.master_key.as_deref())?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener
        .local_addr()
        .context("cannot read the bound address")?;
    raise_descriptor_limit();
    if let Some(metrics) = config.metrics_listen {
        crate::metrics_listener::spawn(metrics, engine.clone()).await;
    }
    spawn_audit_pruning(&engine, config.audit_retention_days);
    spawn_ended_pruning(&engine, config.ended_retention_hours);
    tracing::info!("listening on {addr}");
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
    let app = app_with(engine, &config);
    tokio::select! {
        () = crate::listener::serve(listener, app, config.connections, graceful) => {}
        () = drain_limit(begun, grace) => {}
    }
    tracing::info!("stopped; sandboxes keep running");
    Ok(())
}

/// Makes `key` the master key, with the bearer the Inngest SDK derives from it when it
/// has one; former master keys stop working.
fn register_master_key(engine: &Engine, key: Option<&str>) -> anyhow::Result<()> {
    use sandboxd_dialect_inngest::signing_key::{sdk_bearer_for, MIN_SECRET_BYTES};
    let aliases: Vec<String> = key.and_then(sdk_bearer_for).into_iter().collect();
    match key {
        None => {
            tracing::warn!("no master key configured: only keys already in the store are accepted")
        }
        Some(_) if aliases.is_empty() => tracing::warn!(
            "the master key is not `signkey-<env>-<hex>` with at least {MIN_SECRET_BYTES} \
             bytes of hex: it works as a bearer, but the Inngest SDK cannot use it"
        ),
        Some(_) => {}
    }
    engine
        .set_master_key(key, &aliases)
        .context("cannot register the master key")
}

/// Prunes the audit trail of entries older than `days` now and every hour (0: never).
fn spawn_audit_pruning(engine: &Arc<Engine>, days: u32) {
    if days == 0 {
        return;
    }
    let engine = Arc::downgrade(engine);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(3600));
        loop {
            every.tick().await;
            let Some(engine) = engine.upgrade() else {
                return;
            };
            let pruned = tokio::task::spawn_blocking(move || engine.prune_audit(days)).await;
            match pruned {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::info!("pruned {n} audit entries older than {days} days"),
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot prune the audit trail"),
                Err(e) => tracing::warn!(error = %e, "audit pruning panicked"),
            }
        }
    });
}

/// Removes ended sandboxes' records older than `hours` (0: never), hourly.
fn spawn_ended_pruning(engine: &Arc<Engine>, hours: u32) {
    if hours == 0 {
        return;
    }
    let retention = std::time::Duration::from_secs(u64::from(hours) * 3600);
    let engine = Arc::downgrade(engine);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(3600));
        loop {
            every.tick().await;
            let Some(engine) = engine.upgrade() else {
                return;
            };
            let pruned =
                tokio::task::spawn_blocking(move || engine.prune_ended_sandboxes(retention)).await;
            match pruned {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => {
                    tracing::info!("removed {n} records of sandboxes ended over {hours} h ago")
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot remove ended sandboxes' records"),
                Err(e) => tracing::warn!(error = %e, "ended-record pruning panicked"),
            }
        }
    });
}

/// Raises the soft limit on open descriptors to the hard one: each client connection and
/// each sandbox's agent connection holds one.
fn raise_descriptor_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let raised = getrlimit(Resource::RLIMIT_NOFILE).and_then(|(soft, hard)| match soft < hard {
        true => setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map(|()| hard),
        false => Ok(soft),
    });
    match raised {
        Ok(n) => tracing::debug!("open descriptor limit: {n}"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open descriptor limit"),
    }
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

/// Completes on SIGTERM or SIGINT received from this call on. The handlers are
/// installed by the call itself, not when the future is first polled: a server calls it
/// before it starts anything, so a signal during its start (its warm inits being made)
/// becomes a graceful stop once it serves, never the default action's instant death,
/// which left the inits' mounts, loop devices, cgroups and leases behind.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let streams = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = streams else {
            tracing::warn!("cannot install signal handlers; stop the server with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
            _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
        }
    }
}
