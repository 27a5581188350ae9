//! `open_terminal`: an interactive login shell on a new PTY in a RUNNING sandbox.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::WorkspaceId;
use crate::terminal::Terminal;
use uuid::Uuid;

/// Where terminals start.
pub const TERMINAL_CWD: &str = "/workspace";

impl Engine {
    /// Starts a login shell on a `cols`×`rows` PTY. Dropping the terminal hangs the
    /// shell up.
    pub async fn open_terminal(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        cols: u16,
        rows: u16,
    ) -> Result<Terminal, EngineError> {
        let (io, slot) = self
            .with_agent_held(ws, id, |client, e| {
                let user = self.image_user(e)?;
                Ok(async move {
                    client
                        .open_pty_as(cols, rows, TERMINAL_CWD, user.as_ref())
                        .await
                })
            })
            .await?;
        Ok(Terminal::new(io, (self.activity.begin(id), slot)))
    }
}
