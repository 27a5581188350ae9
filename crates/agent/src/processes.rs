//! Starting a managed process and supervising it until it ends.

use crate::drain::drain;
use crate::error::error;
use crate::shared::Shared;
use crate::spawn::{spawn, Launch, Spawned};
use sandboxd_agent_protocol::{AgentError, AgentErrorCode, ProcessInfo, StartProcess};
use std::sync::Arc;
use std::time::SystemTime;
use uuid::Uuid;

/// Validates, spawns and registers the process (the registry lock is held across the
/// spawn so that two requests with the same id cannot both start).
pub(crate) fn start(shared: &Arc<Shared>, req: StartProcess) -> Result<ProcessInfo, AgentError> {
    let mut registry = shared.registry();
    if registry.contains(req.id) {
        return Err(error(
            AgentErrorCode::ProcessExists,
            format!("process {} exists", req.id),
        ));
    }
    let launch = Launch {
        argv: &req.argv,
        env: req.env.as_ref(),
        cwd: req.cwd.as_deref(),
        user: req.user.as_ref(),
    };
    let spawned = spawn(
        &launch,
        &shared.config.default_env,
        shared.config.confine.as_ref(),
    )?;
    let info = registry.insert(req.id, req.argv, spawned.pid, req.hold_output);
    drop(registry);
    tokio::spawn(supervise(shared.clone(), req.id, spawned));
    Ok(info)
}

async fn supervise(shared: Arc<Shared>, id: Uuid, s: Spawned) {
    let (exited, exited_rx) = tokio::sync::watch::channel(false);
    let sink = shared.clone();
    let reader = tokio::spawn(drain(s.stdout, s.stderr, exited_rx, move |kind, data| {
        let shared = sink.clone();
        async move {
            let at = SystemTime::now();
            shared.log_output(id, kind, data.clone(), at);
            // A held ring waits for its holder to read rather than drop its bytes.
            loop {
                let wait = shared.registry().push(id, kind, &data, at);
                let Some((mut hold, need)) = wait else {
                    return true;
                };
                // An error means the ring was evicted: the next push is a no-op.
                let _ = hold.wait_for(|h| h.allows(need)).await;
            }
        }
    }));
    let exit = s.exit.await.ok();
    shared.registry().mark_reaped(id);
    // Normally the pipes are already at EOF; a descendant holding them must not keep
    // the process from being reported as ended (the drain's grace).
    exited.send_replace(true);
    let _ = reader.await;
    shared.registry().finish(id, exit);
}
