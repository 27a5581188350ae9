//! Output and log streams, handed out without holding any sandbox lock.

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::in_flight::InFlightSlot;
use crate::model::WorkspaceId;
use crate::output::{from_frames as mapped, OutputEvent, OutputStream};
use crate::state::SandboxStatus;
use futures_util::stream::StreamExt;
use sandboxd_store::Store;
use std::sync::Arc;
use uuid::Uuid;

impl Engine {
    /// Retained output of a process (whole chunks within `tail_bytes`, 0 = all), then
    /// live output when `follow`, ending with `Exit`. The ring may drop its oldest bytes
    /// under a slow reader: the stream then carries a `Gap` naming them.
    pub async fn process_output(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        pid: Uuid,
        tail_bytes: u64,
        follow: bool,
    ) -> Result<OutputStream, EngineError> {
        let (s, slot) = self
            .with_agent_held(ws, id, |client, _| {
                Ok(async move { client.output(pid, tail_bytes, follow).await })
            })
            .await?;
        let events = self.until_shutdown(match follow {
            true => ended_by_its_sandbox(mapped(s), self.store.clone(), id),
            false => mapped(s),
        });
        Ok(in_use(events, (self.activity.begin(id), slot)))
    }

    /// The sandbox-level log, then live frames when `follow`. A follow the sandbox's end
    /// cuts (destroy, expiry, a dead agent) ends with a `WrongState` error naming the
    /// sandbox's state, so a reader can tell it from a dropped connection.
    pub async fn logs(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        follow: bool,
    ) -> Result<OutputStream, EngineError> {
        let (s, slot) = self
            .with_agent_held(ws, id, |client, _| {
                Ok(async move { client.logs(follow).await })
            })
            .await?;
        let events = self.until_shutdown(match follow {
            true => ended_by_its_sandbox(mapped(s), self.store.clone(), id),
            false => mapped(s),
        });
        Ok(in_use(events, (self.activity.begin(id), slot)))
    }
}

/// `events`, keeping its sandbox in use (never idle for autoPause) and its workspace's
/// place in flight while it is read (both freed when it is dropped); ended by one
/// `KeyRevoked` error once the key that opened it is revoked.
fn in_use(events: OutputStream, busy: (crate::auto_pause::Busy, InFlightSlot)) -> OutputStream {
    futures_util::stream::unfold(Some((events, busy)), |state| async move {
        let (mut events, busy) = state?;
        tokio::select! {
            biased;
            () = busy.1.revoked() => Some((Err(crate::revocations::key_revoked()), None)),
            item = events.next() => item.map(|item| (item, Some((events, busy)))),
        }
    })
    .boxed()
}

/// Ends `frames` at its first error if sandbox `id` is ending or gone by then.
/// A followed stream that ends with a terminal error, never silently: when it breaks
/// or stops before its process's `Exit`, the error says the sandbox ended (with its
/// state) if it did, or that the agent went away.
fn ended_by_its_sandbox(events: OutputStream, store: Arc<dyn Store>, id: Uuid) -> OutputStream {
    futures_util::stream::unfold(Some((events, false)), move |state| {
        let store = store.clone();
        async move {
            let (mut events, exited) = state?;
            match events.next().await {
                Some(Ok(event)) => {
                    let exited = exited || matches!(event, OutputEvent::Exit(_));
                    Some((Ok(event), Some((events, exited))))
                }
                Some(Err(err)) => {
                    Some((Err(sandbox_ended(store.as_ref(), id).unwrap_or(err)), None))
                }
                None if exited => None,
                None => {
                    let gone = || {
                        EngineError::new(
                            ErrorCode::Unavailable,
                            "the sandbox's agent closed the stream",
                        )
                    };
                    Some((
                        Err(sandbox_ended(store.as_ref(), id).unwrap_or_else(gone)),
                        None,
                    ))
                }
            }
        }
    })
    .boxed()
}

/// The error for a stream cut by its sandbox's end, if the sandbox has ended.
fn sandbox_ended(store: &dyn Store, id: Uuid) -> Option<EngineError> {
    let record = match store.get_sandbox(id) {
        Ok(Some(record)) => record,
        Ok(None) => {
            return Some(EngineError::new(
                ErrorCode::SandboxNotFound,
                "the sandbox is gone",
            ))
        }
        Err(_) => return None,
    };
    let status = SandboxStatus::parse(&record.status)?;
    if !matches!(
        status,
        SandboxStatus::Terminating | SandboxStatus::Terminated | SandboxStatus::Failed
    ) {
        return None;
    }
    let mut err = EngineError::new(
        ErrorCode::WrongState,
        format!(
            "the sandbox ended ({}) while this stream followed it",
            status.as_str()
        ),
    );
    let reason = record
        .end_reason
        .as_deref()
        .and_then(crate::convert::end_reason_parse);
    err.state = Some((status, reason));
    Some(err)
}
