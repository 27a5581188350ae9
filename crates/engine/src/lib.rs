//! The engine owns the truth about sandboxes: one typed set of operations over an
//! explicit lifecycle state machine, persisted through a `Store`, isolated by a `Runtime`.

pub mod error;
pub mod model;
pub mod state;

pub use error::{EngineError, ErrorCode};
pub use model::*;
pub use state::SandboxStatus;
