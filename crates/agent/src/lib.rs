//! The agent: PID 1 inside each sandbox. Serves the protocol of
//! `sandboxd-agent-protocol` on a Unix socket: supervises processes, keeps their output
//! in bounded rings, runs captured commands, delivers signals, moves files.

mod body;
mod clock;
mod drain;
mod error;
mod exec;
mod feed;
mod files;
mod follow;
mod kept_argv;
mod processes;
mod pty;
mod reaper;
mod registry;
mod ring;
mod routes;
mod shared;
mod spawn;
mod vfork;

use hyper_util::rt::TokioIo;
use shared::Shared;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Held by the unit tests that start children. Plain `cargo test` runs tests as threads
/// of one process, where one test's child could be reaped by another's means (the
/// reaper's thread, a look for any child left) and its exit status lost.
#[cfg(test)]
pub(crate) fn children_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static CHILDREN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CHILDREN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Confinement applied in every child as the last step before `exec`. It runs after
/// `fork`, or in a `vfork`-like child sharing the agent's memory, of a possibly
/// multi-threaded process: it must only issue syscalls, never allocate or take locks
/// (prepare everything beforehand, as `sandboxd_confine::prepare` does).
pub type ConfineFn = Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>;

/// How an agent behaves.
#[derive(Clone)]
pub struct AgentConfig {
    /// Environment of commands that do not send their own.
    pub default_env: BTreeMap<String, String>,
    /// Output ring size of each managed process.
    pub ring_bytes: usize,
    /// How many process rings are retained (newest first); older ones are evicted.
    pub max_rings: usize,
    /// How many ended processes are remembered (newest first); older ones are forgotten.
    pub max_ended: usize,
    /// Size of the sandbox-level log ring.
    pub log_ring_bytes: usize,
    /// Confinement for every child (see [`ConfineFn`]).
    pub confine: Option<ConfineFn>,
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("default_env", &self.default_env)
            .field("ring_bytes", &self.ring_bytes)
            .field("max_rings", &self.max_rings)
            .field("max_ended", &self.max_ended)
            .field("log_ring_bytes", &self.log_ring_bytes)
            .field("confine", &self.confine.is_some())
            .finish()
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        let env = [
            ("PATH", sandboxd_agent_protocol::DEFAULT_PATH),
            ("HOME", "/root"),
            ("TERM", "xterm-256color"),
            ("LANG", "C.UTF-8"),
        ];
        Self {
            default_env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ring_bytes: 512 * 1024,
            max_rings: 32,
            max_ended: sandboxd_agent_protocol::limits::KEPT_ENDED_PROCESSES,
            log_ring_bytes: 1024 * 1024,
            confine: None,
        }
    }
}

/// Serves connections on `listener` until the process ends.
pub async fn serve(listener: tokio::net::UnixListener, config: AgentConfig) -> std::io::Result<()> {
    Agent::new(config)
        .serve_until(listener, std::future::pending())
        .await;
    Ok(())
}

/// An agent whose state (processes, output rings, log) outlives its listeners: the
/// gVisor agent stops serving before a checkpoint and serves again after the restore.
#[derive(Clone)]
pub struct Agent {
    shared: Arc<Shared>,
}

impl Agent {
    pub fn new(config: AgentConfig) -> Self {
        Self {
            shared: Arc::new(Shared::new(config)),
        }
    }

    /// Serves connections on `listener` until `stop` completes; then drops the listener
    /// and ends every open connection and PTY session (their shells get SIGHUP), so that
    /// no socket of the agent's is left open.
    pub async fn serve_until(
        &self,
        listener: tokio::net::UnixListener,
        stop: impl std::future::Future<Output = ()>,
    ) {
        let mut connections = tokio::task::JoinSet::new();
        let mut reaping = reaper::InRuntime::start();
        tokio::pin!(stop);
        loop {
            let stream = tokio::select! {
                () = &mut stop => break,
                Some(()) = reaper::reaped(&mut reaping) => continue,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        // Out of descriptors or similar: back off instead of spinning.
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let shared = self.shared.clone();
            let ended = shared.connections();
            connections.spawn(async move {
                let service =
                    hyper::service::service_fn(move |req| routes::handle(shared.clone(), req));
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                tokio::select! {
                    result = conn => if let Err(e) = result {
                        tracing::debug!(error = %e, "connection ended with an error");
                    },
                    () = ended.cancelled() => {}
                }
            });
        }
        drop(listener);
        // The thread reaps again while the connections end (nothing here listens now).
        drop(reaping);
        self.shared.end_connections();
        connections.shutdown().await;
    }
}

/// Does before the agent serves what its first command would otherwise pay for (about
/// 0.4 ms of CPU measured, most of the first exec's extra time): the child reaper's
/// thread and SIGCHLD handler, and the CPU feature detection the HTTP parser runs on the
/// first request (several `cpuid`, each a trap to the hypervisor in a VM). A warm init
/// serves while parked, so this happens before its sandbox is asked for. Call it once
/// the process is confined: threads started before that would not be.
fn prepare_first_command() {
    // A reaper that cannot start fails every spawn with this error later, as before.
    if let Err(e) = reaper::start_early() {
        tracing::warn!(error = %e, "cannot start the child reaper");
    }
    #[cfg(target_arch = "x86_64")]
    let _ = std::is_x86_feature_detected!("sse4.2");
    // What every command's start reads, found out now rather than at the first one.
    vfork::prepare();
    spawn::may_set_oom_score();
    let _ = spawn::dev_null();
}

/// Runs the agent on a current-thread runtime (small memory footprint); never returns.
pub fn run_blocking(listener: std::os::unix::net::UnixListener, config: AgentConfig) -> ! {
    prepare_first_command();
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .and_then(|rt| {
            rt.block_on(async {
                listener.set_nonblocking(true)?;
                serve(tokio::net::UnixListener::from_std(listener)?, config).await
            })
        });
    if let Err(e) = result {
        tracing::error!(error = %e, "agent stopped");
    }
    std::process::exit(1)
}
