//! SandboxEvents, the NDJSON lines of a streamed create or exec, and the emitter that
//! numbers them and keeps a copy for the idempotency record.

use crate::error::ErrorBody;
use crate::views::SandboxView;
use bytes::Bytes;
use serde::Serialize;
use tokio::sync::mpsc;

/// One event; each line is `{"seq": N, "type": …, …}`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Event {
    /// Always first: the sandbox the request created (or ran in).
    Sandbox {
        sandbox: Box<SandboxView>,
    },
    /// The command started.
    #[serde(rename_all = "camelCase")]
    Started {
        exec_id: String,
    },
    /// A chunk of standard output as UTF-8 text (a character split across chunks is
    /// carried to the next chunk; invalid bytes become U+FFFD).
    Stdout {
        data: String,
    },
    Stderr {
        data: String,
    },
    /// Always last when a command ran: how it ended.
    #[serde(rename_all = "camelCase")]
    Exit {
        exec_id: String,
        exit_code: Option<i32>,
        truncated: bool,
        error: Option<ErrorBody>,
    },
}

#[derive(Serialize)]
struct Line<'a> {
    seq: u64,
    #[serde(flatten)]
    event: &'a Event,
}

/// Numbers events from 0, sends each line to the client (if still connected) and
/// keeps every line for the idempotency record.
pub struct Emitter {
    next: u64,
    tx: Option<mpsc::Sender<Bytes>>,
    pub recorded: Vec<u8>,
}

impl Emitter {
    pub fn new(tx: Option<mpsc::Sender<Bytes>>) -> Self {
        Self {
            next: 0,
            tx,
            recorded: Vec::new(),
        }
    }

    pub async fn emit(&mut self, event: Event) {
        let line = Line {
            seq: self.next,
            event: &event,
        };
        self.next += 1;
        let mut bytes = match serde_json::to_vec(&line) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "cannot encode a sandbox event");
                return;
            }
        };
        bytes.push(b'\n');
        self.recorded.extend_from_slice(&bytes);
        if let Some(tx) = &self.tx {
            // A client that went away stops receiving; the run and the record go on.
            if tx.send(Bytes::from(bytes)).await.is_err() {
                self.tx = None;
            }
        }
    }
}

/// The lines of a recorded stream whose `seq` is greater than `after`.
pub fn resume_after(recorded: &[u8], after: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for line in recorded.split_inclusive(|b| *b == b'\n') {
        let seq = serde_json::from_slice::<serde_json::Value>(line.trim_ascii_end())
            .ok()
            .and_then(|v| v["seq"].as_u64());
        if seq.is_none_or(|s| s > after) {
            out.extend_from_slice(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn numbers_lines_and_resumes_after_a_seq() {
        let mut e = Emitter::new(None);
        e.emit(Event::Started {
            exec_id: "x".into(),
        })
        .await;
        e.emit(Event::Stdout { data: "hi".into() }).await;
        e.emit(Event::Exit {
            exec_id: "x".into(),
            exit_code: Some(0),
            truncated: false,
            error: None,
        })
        .await;
        let text = String::from_utf8(e.recorded.clone()).unwrap();
        assert!(
            text.starts_with("{\"seq\":0,\"type\":\"started\",\"execId\":\"x\"}\n"),
            "{text}"
        );
        let rest = String::from_utf8(resume_after(&e.recorded, 1)).unwrap();
        assert_eq!(rest.lines().count(), 1);
        assert!(rest.contains("\"seq\":2"));
        assert_eq!(resume_after(&e.recorded, 99), Vec::<u8>::new());
    }
}
