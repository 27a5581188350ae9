//! Telling a missing shell apart from other failures to start a command: a sandbox
//! from an image with no shell (distroless, a lone static binary) cannot run the shell
//! lines some dialects' commands are, and the caller should hear that plainly.

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::WorkspaceId;
use uuid::Uuid;

impl Engine {
    /// Whether `path` is a regular file in RUNNING sandbox `id` (symlinks followed
    /// inside the sandbox's root, by its agent).
    pub async fn has_file(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        path: &str,
    ) -> Result<bool, EngineError> {
        match self.read_file(ws, id, path).await {
            Ok(_) => Ok(true),
            Err(e) if e.code == ErrorCode::FileNotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `err` (from starting a command by `shell`, which `purpose` names), or, when
    /// sandbox `id` has no `shell`, an `InvalidArgument` error that says so.
    pub async fn explain_missing_shell(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        shell: &str,
        purpose: &str,
        err: EngineError,
    ) -> EngineError {
        if err.code != ErrorCode::InvalidArgument {
            return err;
        }
        match self.has_file(ws, id, shell).await {
            Ok(false) => missing_shell(shell, purpose),
            _ => err,
        }
    }
}

/// The error for a sandbox whose image has no `shell`.
pub fn missing_shell(shell: &str, purpose: &str) -> EngineError {
    EngineError::invalid(format!(
        "this sandbox's image has no {shell}, which {purpose}; run a program of the image \
         by its absolute path instead"
    ))
}
