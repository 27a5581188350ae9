//! Output and log streams, handed out without holding any sandbox lock.

use super::Hold;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::WorkspaceId;
use crate::output::{from_frames as mapped, OutputStream};
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
        let s = self
            .with_agent(ws, id, Hold::Check, |client, _| {
                Ok(async move { client.output(pid, tail_bytes, follow).await })
            })
            .await?;
        Ok(self.until_shutdown(mapped(s)))
    }

    /// All output of a held process from its first byte, then live output until
    /// `Exit`, as its holder: the process waits for this reader, nothing is dropped.
    pub(crate) async fn held_output(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        pid: Uuid,
    ) -> Result<OutputStream, EngineError> {
        let s = self
            .with_agent(ws, id, Hold::Check, |client, _| {
                Ok(async move { client.output_from(pid, 0, true).await })
            })
            .await?;
        Ok(mapped(s))
    }

    /// The sandbox-level log, then live frames when `follow`. A follow ends cleanly
    /// (no error frame) when the sandbox ends: destroy or expiry stops its agent, and
    /// the broken agent stream is then the end of the log, not a failure.
    pub async fn logs(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        follow: bool,
    ) -> Result<OutputStream, EngineError> {
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
fn until_ended(frames: OutputStream, store: Arc<dyn Store>, id: Uuid) -> OutputStream {
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
