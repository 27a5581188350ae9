//! `open_terminal`: an interactive login shell on a new PTY in a RUNNING sandbox.

use super::Hold;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::WorkspaceId;
use sandboxd_agent_protocol::pty::PtyIo;
use uuid::Uuid;

/// Where terminals start.
pub const TERMINAL_CWD: &str = "/workspace";

impl Engine {
    /// Starts a login shell on a `cols`×`rows` PTY and returns the connection that
    /// carries its [`PtyFrame`](sandboxd_agent_protocol::pty::PtyFrame)s. Closing it
    /// hangs the shell up.
    pub async fn open_terminal(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        cols: u16,
        rows: u16,
    ) -> Result<PtyIo, EngineError> {
        self.with_agent(ws, id, Hold::Check, |client, _| {
            Ok(async move { client.open_pty(cols, rows, TERMINAL_CWD).await })
        })
        .await
    }
}
