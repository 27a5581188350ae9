//! The engine's output model, the one dialects see: chunks of a process's or command's
//! output with their stream and byte offset, gaps where a ring dropped bytes before a
//! reader got them, and how a process ended (a code or a signal, with its shell code).

use crate::agent_error;
use crate::error::{EngineError, ErrorCode};
use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use sandboxd_agent_protocol::{AgentError, AgentErrorCode, ClientError, Frame};
use serde::Serialize;
use uuid::Uuid;

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum StreamKind {
    Stdout,
    Stderr,
}

impl From<sandboxd_agent_protocol::StreamKind> for StreamKind {
    fn from(k: sandboxd_agent_protocol::StreamKind) -> Self {
        match k {
            sandboxd_agent_protocol::StreamKind::Stdout => StreamKind::Stdout,
            sandboxd_agent_protocol::StreamKind::Stderr => StreamKind::Stderr,
        }
    }
}

/// One read of output, exactly as read (not a line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    pub stream: StreamKind,
    pub data: Bytes,
    /// Offset of its first byte in all the output of its source (stdout and stderr
    /// counted together); consecutive chunks are contiguous unless a `Gap` separates them.
    pub offset: u64,
    /// RFC 3339 with nanoseconds, when the agent read it.
    pub at: String,
    /// The process it came from (sandbox-level log only).
    pub process: Option<Uuid>,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessExit {
    /// It exited with this code.
    Code(i32),
    /// Signal N killed it.
    Signal(i32),
}

impl ProcessExit {
    /// The shell's convention: the code, or 128+N for signal N.
    pub fn shell_code(self) -> i32 {
        match self {
            ProcessExit::Code(c) => c,
            ProcessExit::Signal(s) => 128 + s,
        }
    }

    /// From the agent's exit code and signal fields (`None` when neither is known).
    pub fn from_parts(code: Option<i32>, signal: Option<i32>) -> Option<ProcessExit> {
        match (code, signal) {
            (Some(c), _) => Some(ProcessExit::Code(c)),
            (None, Some(s)) => Some(ProcessExit::Signal(s)),
            (None, None) => None,
        }
    }
}

/// One event of an output stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputEvent {
    Chunk(OutputChunk),
    /// Bytes `from..to` were dropped from a ring before this reader read them; the
    /// stream goes on at `to`. Only rings drop (process output and logs), never a
    /// command streamed with `exec_stream`.
    Gap {
        from: u64,
        to: u64,
    },
    /// The process ended (the last event); `None` when its end is unknown (lost).
    Exit(Option<ProcessExit>),
}

/// Events of an output stream; a failure mid-stream is an `EngineError` item, the last.
pub type OutputStream = BoxStream<'static, Result<OutputEvent, EngineError>>;

/// Decodes the agent's frames into output events (the one place that does).
pub(crate) fn from_frames(frames: sandboxd_agent_protocol::FrameStream) -> OutputStream {
    frames
        .map(|item| match item {
            Ok(frame) => event(frame),
            Err(e) => Err(agent_error::map(e)),
        })
        .boxed()
}

fn event(frame: Frame) -> Result<OutputEvent, EngineError> {
    use base64::Engine as _;
    match frame {
        Frame::Log {
            stream,
            data,
            at,
            process,
            offset,
        } => {
            let data = base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|_| {
                    EngineError::new(ErrorCode::Unavailable, "the sandbox agent answered badly")
                })?;
            Ok(OutputEvent::Chunk(OutputChunk {
                stream: stream.into(),
                data: data.into(),
                offset,
                at,
                process,
            }))
        }
        Frame::Gap { from, to } => Ok(OutputEvent::Gap { from, to }),
        Frame::Exit { info } => Ok(OutputEvent::Exit(ProcessExit::from_parts(
            info.exit_code,
            info.signal,
        ))),
        Frame::Error { code, message } => {
            let code = serde_json::from_value::<AgentErrorCode>(serde_json::Value::String(code))
                .unwrap_or(AgentErrorCode::Io);
            Err(agent_error::map(ClientError::Agent(AgentError {
                code,
                message,
            })))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_frames_and_maps_mid_stream_errors() {
        let chunk = event(Frame::Log {
            stream: sandboxd_agent_protocol::StreamKind::Stderr,
            data: "aGk=".into(),
            at: "t".into(),
            process: None,
            offset: 7,
        });
        let Ok(OutputEvent::Chunk(c)) = chunk else {
            panic!("a chunk")
        };
        assert_eq!(
            (c.stream, &c.data[..], c.offset),
            (StreamKind::Stderr, &b"hi"[..], 7)
        );
        let err = event(Frame::Error {
            code: "output_not_retained".into(),
            message: "m".into(),
        });
        assert_eq!(err.map_err(|e| e.code), Err(ErrorCode::OutputNotRetained));
        assert_eq!(ProcessExit::Signal(9).shell_code(), 137);
        assert_eq!(ProcessExit::Code(3).shell_code(), 3);
    }
}
