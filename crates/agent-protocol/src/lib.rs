//! The contract between the host and the agent (PID 1 inside a sandbox): wire types
//! for a small versioned HTTP/1.1 + NDJSON protocol over a Unix socket, and a client.
//!
//! Routes (all under `/v1`, JSON bodies unless noted):
//! - `GET  /v1/health` → [`Health`]
//! - `POST /v1/exec` [`ExecRequest`] → [`ExecResult`] (captured command, output cap, timeout)
//! - `POST /v1/processes` [`StartProcess`] → [`ProcessInfo`]
//! - `GET  /v1/processes` → `Vec<ProcessInfo>` (managed processes, sorted by id)
//! - `GET  /v1/processes/{id}` → [`ProcessInfo`]
//! - `POST /v1/processes/{id}/signal` [`SignalRequest`] → 204
//! - `POST /v1/processes/{id}/wait?timeout_ms=N` → [`ProcessInfo`] (terminal) or
//!   error `wait_timed_out`
//! - `GET  /v1/processes/{id}/output?tail_bytes=N&follow=BOOL` → NDJSON of [`Frame`]
//! - `GET  /v1/logs?follow=BOOL` → NDJSON of [`Frame`] from the sandbox-level log ring
//! - `GET  /v1/files?path=P` → raw bytes; headers `Content-Length`, `X-File-Mode` (octal),
//!   `X-File-Mtime` (unix seconds)
//! - `PUT  /v1/files?path=P&mode=OCTAL` raw body → [`FileWritten`] (atomic replacement)
//!
//! Every error is a JSON [`AgentError`] body with a stable `code`.

pub mod client;
pub mod query;
mod transport;
pub mod types;

pub use client::{AgentClient, ByteStream, ClientError, FrameStream};
pub use types::*;

/// Protocol version reported by `/v1/health`; bump on incompatible changes.
pub const PROTOCOL_VERSION: u32 = 1;
