//! Errors of the runtime backends.

use std::path::PathBuf;

/// Everything a backend can fail with; each variant speaks for the backend's layer.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("unknown image {0:?}")]
    UnknownImage(String),
    #[error("unknown layer {0:?}")]
    UnknownLayer(String),
    #[error("this host cannot run sandboxes: {0}")]
    Unsupported(String),
    #[error("{what} at {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}")]
    Sys {
        what: &'static str,
        #[source]
        source: nix::Error,
    },
    #[error("sandbox agent failed to start: {0}")]
    AgentStart(String),
    #[error("sandbox network: {0}")]
    Network(String),
    /// The sandbox is in no state to be checkpointed (it keeps running as it was).
    #[error("cannot pause to disk: {0}")]
    CannotCheckpoint(String),
    #[error("no free host id range for a new sandbox")]
    IdRangesExhausted,
    /// A test made this step fail (see [`crate::faults`]).
    #[error("injected fault at {0}")]
    Injected(&'static str),
}
