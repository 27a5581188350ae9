//! The engine's fault injection points: failed store writes (see
//! `sandboxd_runtime::faults` for the feature, the actions and every point's name).

use crate::error::{EngineError, ErrorCode};
use crate::state::SandboxStatus;

/// The error of a store write a test made fail: what a failed SQLite write gives.
fn injected(name: &str) -> EngineError {
    EngineError::new(
        ErrorCode::Internal,
        format!("the sandbox database failed: injected fault at {name}"),
    )
}

/// `Err` when a test asked store write `name` to fail.
pub(crate) fn store_write(name: &'static str) -> Result<(), EngineError> {
    match sandboxd_runtime::faults::hit(name) {
        true => Err(injected(name)),
        false => Ok(()),
    }
}

/// `Err` when a test asked the store write of a sandbox moving to `status` to fail
/// (`store.save.<STATUS>`).
pub(crate) fn store_write_to(status: SandboxStatus) -> Result<(), EngineError> {
    const NAMES: [(SandboxStatus, &str); 9] = [
        (SandboxStatus::Pending, "store.save.PENDING"),
        (SandboxStatus::Starting, "store.save.STARTING"),
        (SandboxStatus::Running, "store.save.RUNNING"),
        (SandboxStatus::Pausing, "store.save.PAUSING"),
        (SandboxStatus::Paused, "store.save.PAUSED"),
        (SandboxStatus::Resuming, "store.save.RESUMING"),
        (SandboxStatus::Terminating, "store.save.TERMINATING"),
        (SandboxStatus::Terminated, "store.save.TERMINATED"),
        (SandboxStatus::Failed, "store.save.FAILED"),
    ];
    match NAMES.iter().find(|(s, _)| *s == status) {
        Some((_, name)) => store_write(name),
        None => Ok(()),
    }
}
