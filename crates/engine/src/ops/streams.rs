//! Output and log streams, handed out without holding any sandbox lock.

use super::Hold;
use crate::agent_error;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::{Frame, WorkspaceId};
use crate::state::SandboxStatus;
use futures_util::stream::{BoxStream, StreamExt};
use sandboxd_store::Store;
use std::sync::Arc;
use uuid::Uuid;

/// Frames of a process's output or of the sandbox log, errors already mapped.
pub type FrameStream = BoxStream<'static, Result<Frame, EngineError>>;

fn mapped(s: sandboxd_agent_protocol::client::FrameStream) -> FrameStream {
    s.map(|r| r.map_err(agent_error::map)).boxed()
}

impl Engine {
    /// Retained output of a process (whole chunks within `tail_bytes`, 0 = all), then
    /// live output when `follow`.
    pub async fn process_output(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        pid: Uuid,
        tail_bytes: u64,
        follow: bool,
    ) -> Result<FrameStream, EngineError> {
        let s = self
            .with_agent(ws, id, Hold::Check, |client, _| {
                Ok(async move { client.output(pid, tail_bytes, follow).await })
            })
            .await?;
        Ok(self.until_shutdown(mapped(s)))
    }

    /// The sandbox-level log, then live frames when `follow`. A follow ends cleanly
    /// (no error frame) when the sandbox ends: destroy or expiry stops its agent, and
    /// the broken agent stream is then the end of the log, not a failure.
    pub async fn logs(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        follow: bool,
    ) -> Result<FrameStream, EngineError> {
        let s = self
            .with_agent(ws, id, Hold::Check, |client, _| {
                Ok(async move { client.logs(follow).await })
            })
            .await?;
        Ok(self.until_shutdown(match follow {
            true => until_ended(mapped(s), self.store.clone(), id),
            false => mapped(s),
        }))
    }
}

/// Ends `frames` at its first error if sandbox `id` is ending or gone by then.
fn until_ended(frames: FrameStream, store: Arc<dyn Store>, id: Uuid) -> FrameStream {
    frames
        .then(move |item| {
            let store = store.clone();
            async move {
                match item {
                    Err(err) if sandbox_ended(store.as_ref(), id) => {
                        tracing::debug!(%id, %err, "log follow ended with the sandbox");
                        None
                    }
                    other => Some(other),
                }
            }
        })
        .take_while(|item| std::future::ready(item.is_some()))
        .filter_map(std::future::ready)
        .boxed()
}

fn sandbox_ended(store: &dyn Store, id: Uuid) -> bool {
    match store.get_sandbox(id) {
        Ok(Some(record)) => matches!(
            SandboxStatus::parse(&record.status),
            Some(SandboxStatus::Terminating | SandboxStatus::Terminated) | None
        ),
        Ok(None) => true,
        Err(_) => false,
    }
}
