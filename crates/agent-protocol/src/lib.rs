//! The contract between the host and the agent (PID 1 inside a sandbox): wire types
//! for a small versioned HTTP/1.1 + NDJSON protocol over a Unix socket, and a client.
//!
//! Routes (all under `/v1`, JSON bodies unless noted):
//! - `GET  /v1/health` → [`Health`]
//! - `POST /v1/exec` [`ExecRequest`] → [`ExecResult`] (captured command, output cap, timeout)
//! - `POST /v1/processes` [`StartProcess`] → [`ProcessInfo`]
//! - `POST /v1/processes?follow=true` [`StartProcess`] → NDJSON of [`Frame`]: the
//!   start and its output from offset 0 until `Exit` in one exchange (the holder's
//!   stream when `hold_output`); a start that fails answers its error as above
//! - `GET  /v1/processes[?after=ID&limit=N]` → `Vec<ProcessInfo>` (managed processes,
//!   sorted by id; those after `after`, at most `N` of them; `0` or none: all)
//! - `GET  /v1/processes/{id}` → [`ProcessInfo`]
//! - `POST /v1/processes/{id}/signal` [`SignalRequest`] → 204
//! - `POST /v1/processes/{id}/wait?timeout_ms=N` → [`ProcessInfo`] (terminal) or
//!   error `wait_timed_out`
//! - `GET  /v1/processes/{id}/output?tail_bytes=N&from=OFFSET&follow=BOOL&hold=BOOL` →
//!   NDJSON of [`Frame`]
//! - `GET  /v1/logs?follow=BOOL` → NDJSON of [`Frame`] from the sandbox-level log ring
//! - `GET  /v1/files?path=P` → raw bytes; headers `Content-Length`, `X-File-Mode` (octal),
//!   `X-File-Mtime` (unix seconds)
//! - `PUT  /v1/files?path=P&mode=OCTAL` raw body → [`FileWritten`] (atomic replacement)
//! - `GET  /v1/pty?cols=C&rows=R&cwd=P[&uid=U&gid=G&groups=G1,G2]` with
//!   `Upgrade: sandboxd-pty` → 101, then PTY frames (see [`pty`]): an interactive login
//!   shell on a new terminal (as that user when given; exec and processes take `user`)
//!
//! Every error is a JSON [`AgentError`] body with a stable `code`. The client reads no
//! answer whole past a cap (see [`limits`]): the agent is untrusted.
//!
//! Semantics fixed by the agent:
//! - Output frames are chunks exactly as read (at most 32 KiB each, arbitrary bytes),
//!   in read order across stdout and stderr. `tail_bytes=N` returns the newest *whole*
//!   chunks whose sizes sum to at most N; if the newest chunk alone is larger than N it
//!   is returned alone (a tail is never empty while output exists). `0` means all.
//! - An output stream of a process that has already ended (follow or not) ends with its
//!   `Exit` frame; with `follow=true` on a running process, live chunks follow the tail
//!   and the stream ends after `Exit`. Every `Log` frame carries its byte offset; a
//!   reader whose next bytes were dropped from the ring (it fell a ring behind, or
//!   asked `from` an offset no longer retained) gets a `Gap` frame naming the lost
//!   range, then goes on: a stream never skips bytes without saying so. If the
//!   process's ring is evicted while followed, the stream ends with an `Error` frame
//!   (`output_not_retained`).
//! - A process started with `hold_output` drops nothing its holder (the reader with
//!   `hold=true`) has not read: while the holder lags, the agent stops draining the
//!   process's pipes (back-pressure) until the holder reads on or goes away.
//! - A process is reported terminal once its exit status is collected and its output
//!   pipes are drained (or, when a descendant keeps them open, after a 1 s grace).
//! - `wait` without `timeout_ms` waits indefinitely.
//! - Exec: `timeout_ms: 0` means no timeout; `max_output_bytes: 0` means the agent's
//!   default cap (16 MiB). Signals are 1..=64; signalling an ended process is a no-op.
//! - Files: `mode` defaults to `644`; uploads land in a temp file beside the target and
//!   are renamed into place (the parent directory must exist).

pub mod client;
pub mod limits;
mod pool;
pub mod pty;
pub mod query;
pub mod socket_path;
mod transport;
pub mod types;

pub use client::{AgentClient, ByteStream, ClientError, FrameStream};
pub use types::*;

/// Protocol version reported by `/v1/health`; bump on incompatible changes.
pub const PROTOCOL_VERSION: u32 = 1;

/// `PATH` of a command that names none: the usual directories, then the built-in
/// image's own links (`/opt/sandboxd/bin`: `python` → `python3`, as Debian's
/// `python-is-python3` would make it).
pub const DEFAULT_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/sandboxd/bin";
