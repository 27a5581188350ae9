//! The engine owns the truth about sandboxes: one typed set of operations over an
//! explicit lifecycle state machine, persisted through a `Store`, isolated by a `Runtime`.

pub mod access;
pub mod accounts;
mod agent_error;
pub mod audit;
pub mod auto_pause;
mod capture_freeze;
pub mod console_codes;
mod convert;
pub mod cursor;
mod db_room;
pub mod disk;
pub mod disk_admission;
mod disk_reservations;
pub mod egress;
mod engine;
pub mod error;
mod faults;
pub mod idempotency;
pub mod image_user;
mod in_flight;
mod lifecycle;
mod locks;
mod memory_images;
pub mod metrics;
pub mod model;
mod ops;
pub mod output;
mod output_budget;
mod pause_admission;
pub mod quota;
pub mod request;
pub mod results;
mod revocations;
mod secrets;
mod sessions;
mod shared_measure;
mod shutdown;
mod snapshot_admission;
mod snapshots;
pub mod state;
pub mod templates;
pub mod terminal;
pub mod usage;
pub mod validate;
mod workspace_image;
mod workspace_isolation;

pub use access::{AccessDenied, SandboxAccess, ALL_SCOPE};
pub use accounts::{ApiKeyInfo, Principal, Workspace, ALL_PERMISSIONS, DEFAULT_WORKSPACE};
pub use auto_pause::AutoPause;
pub use disk_admission::DiskPolicy;
pub use engine::{Engine, EngineConfig, Limits};
pub use error::{EngineError, ErrorCode};
pub use idempotency::{Remembered, IDEMPOTENCY_TTL};
pub use in_flight::InFlightSlot;
pub use lifecycle::deadline::Deadlines;
pub use model::*;
pub use ops::{
    missing_shell, ExecEnd, ExecEvent, ExecStream, OnCap, SandboxEnd, StreamCommand,
    AGENT_DEFAULT_ENV, KILLED_EXIT, TIMED_OUT_EXIT,
};
pub use output::{OutputChunk, OutputEvent, OutputStream, ProcessExit, StreamKind};
pub use output_budget::{OutputHold, BYTES_PER_OUTPUT_BYTE};
pub use quota::{CreateRate, Quota};
pub use results::ByteStream;
pub use revocations::key_revoked;
pub use sandboxd_runtime::{EgressPolicy, EgressRule, Isolation, NetworkMode, Requests};
pub use state::SandboxStatus;
pub use templates::{Template, TemplateBuild, BUILTIN_TEMPLATES};
pub use terminal::{Terminal, TerminalEvent, TerminalInput, TerminalOutput};
pub use usage::SandboxUsage;
