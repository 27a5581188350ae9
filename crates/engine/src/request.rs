//! The HTTP request an operation runs for: its id, and the key that authenticated it
//! once a dialect has done so. The server sets it around each request; the engine
//! reads it for the audit trail and the request log, dialects for error bodies.

use std::sync::{Arc, Mutex};
use uuid::Uuid;

tokio::task_local! {
    static CURRENT: Arc<RequestContext>;
}

/// Who a request authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The key's own workspace (`None`: an account-scoped key).
    pub workspace: Option<String>,
    pub key_id: Uuid,
}

/// One request's id and caller.
#[derive(Debug)]
pub struct RequestContext {
    pub id: String,
    caller: Mutex<Option<Caller>>,
    /// Who asked when no API key did (`console`): a fixed, bounded name.
    actor: Mutex<Option<&'static str>>,
}

impl RequestContext {
    pub fn new(id: String) -> Arc<Self> {
        Arc::new(RequestContext {
            id,
            caller: Mutex::new(None),
            actor: Mutex::new(None),
        })
    }

    /// The caller, once a dialect authenticated the request.
    pub fn caller(&self) -> Option<Caller> {
        self.caller
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Runs `fut` with this context as the current one.
    pub async fn scope<F: std::future::Future>(self: Arc<Self>, fut: F) -> F::Output {
        CURRENT.scope(self, fut).await
    }
}

/// Spawns `fut` as a task of its own that keeps the current request's context, so that
/// work which must outlive its request (a client that leaves mid-build or mid-snapshot)
/// is still audited and logged as that request's (its key, its id), and ends with what
/// its key opened when that key is revoked.
pub fn spawn_for_request<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    match CURRENT.try_with(Arc::clone) {
        Ok(context) => tokio::spawn(CURRENT.scope(context, fut)),
        Err(_) => tokio::spawn(fut),
    }
}

/// The current request's id, when running for one.
pub fn current_id() -> Option<String> {
    CURRENT.try_with(|c| c.id.clone()).ok()
}

/// Who the current request acts for, for the audit trail: its key's id, else the
/// actor set with [`set_actor`].
pub(crate) fn current_actor() -> Option<String> {
    CURRENT
        .try_with(|c| {
            c.caller().map(|c| c.key_id.to_string()).or_else(|| {
                c.actor
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .map(str::to_owned)
            })
        })
        .ok()
        .flatten()
}

/// The API key that authenticated the current request, if any.
pub(crate) fn current_key() -> Option<Uuid> {
    CURRENT
        .try_with(|c| c.caller().map(|c| c.key_id))
        .ok()
        .flatten()
}

/// Names who the current request acts for when it carries no API key (the console
/// sets `console` for its signed-in sessions).
pub fn set_actor(actor: &'static str) {
    let _ = CURRENT.try_with(|c| {
        *c.actor.lock().unwrap_or_else(|p| p.into_inner()) = Some(actor);
    });
}

/// Records the caller of the current request (the engine calls this on authentication).
pub(crate) fn set_caller(caller: Caller) {
    let _ = CURRENT.try_with(|c| {
        *c.caller.lock().unwrap_or_else(|p| p.into_inner()) = Some(caller);
    });
}
