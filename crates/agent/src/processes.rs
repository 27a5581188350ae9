//! Starting a managed process and supervising it until it ends.

use crate::drain::drain;
use crate::error::error;
use crate::shared::{Shared, DRAIN_GRACE};
use crate::spawn::{spawn, Launch, Spawned};
use sandboxd_agent_protocol::{AgentError, AgentErrorCode, ProcessInfo, StartProcess};
use std::sync::Arc;
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
    };
    let spawned = spawn(
        &launch,
        &shared.config.default_env,
        shared.config.confine.as_ref(),
    )?;
    let info = registry.insert(req.id, req.argv, spawned.pid);
    drop(registry);
    tokio::spawn(supervise(shared.clone(), req.id, spawned));
    Ok(info)
}

async fn supervise(shared: Arc<Shared>, id: Uuid, s: Spawned) {
    let sink = shared.clone();
    let reader = tokio::spawn(drain(s.stdout, s.stderr, move |kind, data| {
        let chunk = sink.record(id, kind, data);
        sink.registry().push(id, chunk);
        true
    }));
    let exit = s.exit.await.ok();
    shared.registry().mark_reaped(id);
    // Normally the pipes are already at EOF; a descendant holding them must not keep
    // the process from being reported as ended.
    let _ = tokio::time::timeout(DRAIN_GRACE, reader).await;
    shared.registry().finish(id, exit);
}
