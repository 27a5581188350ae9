//! Output and log streams, handed out without holding any sandbox lock.

use super::Hold;
use crate::agent_error;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::{Frame, WorkspaceId};
use futures_util::stream::{BoxStream, StreamExt};
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
        Ok(mapped(s))
    }

    /// The sandbox-level log, then live frames when `follow`.
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
        Ok(mapped(s))
    }
}
