//! NDJSON frames of the log and output streams: `log` chunks and a terminal `error`.
//! The page's streams have no loss marker: a reader that fell off the ring (a `Gap`)
//! gets the terminal error `sandbox_process_output_not_retained` instead of a hole.

use crate::error::{status_and_code, ErrorItem};
use crate::views::{chunk, ChunkView};
use futures_util::{Stream, StreamExt};
use sandboxd_engine::{EngineError, ErrorCode, OutputEvent};
use serde::Serialize;

/// One line of a stream.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum StreamFrame {
    Log(ChunkView),
    /// Terminal failure. `errors` is the documented shape; `error` is what the SDK reads.
    Error {
        errors: [ErrorItem; 1],
        error: ErrorItem,
    },
}

impl StreamFrame {
    fn error(code: &'static str, message: String) -> Self {
        let item = ErrorItem { code, message };
        StreamFrame::Error {
            errors: [item.clone()],
            error: item,
        }
    }

    pub fn from_engine_error(err: &EngineError) -> Self {
        Self::error(status_and_code(err.code).1, err.message.clone())
    }
}

/// The error a reader gets for a gap: bytes `from..to` left the ring before it read them.
pub fn gap_error(from: u64, to: u64) -> EngineError {
    EngineError::new(
        ErrorCode::OutputNotRetained,
        format!(
            "the reader fell behind: output bytes {from}..{to} were dropped from the retained ring before it read them"
        ),
    )
}

/// Turns engine output events into API frames: chunks pass, the exit is dropped, a gap
/// or an error ends the stream with an error frame.
pub fn api_frames<S>(events: S) -> impl Stream<Item = StreamFrame> + Send + 'static
where
    S: Stream<Item = Result<OutputEvent, EngineError>> + Send + 'static,
{
    events
        .map(|item| match item {
            Ok(OutputEvent::Chunk(c)) => Some(StreamFrame::Log(chunk(&c))),
            Ok(OutputEvent::Gap { from, to }) => {
                Some(StreamFrame::from_engine_error(&gap_error(from, to)))
            }
            Ok(OutputEvent::Exit(_)) => None,
            Err(err) => Some(StreamFrame::from_engine_error(&err)),
        })
        .filter_map(futures_util::future::ready)
        .scan(false, |ended, frame| {
            if *ended {
                return futures_util::future::ready(None);
            }
            *ended = matches!(frame, StreamFrame::Error { .. });
            futures_util::future::ready(Some(frame))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_engine::{OutputChunk, StreamKind};

    fn log(
        stream: StreamKind,
        data: &'static [u8],
        offset: u64,
    ) -> Result<OutputEvent, EngineError> {
        Ok(OutputEvent::Chunk(OutputChunk {
            stream,
            data: bytes::Bytes::from_static(data),
            offset,
            at: "t".into(),
            process: None,
        }))
    }

    #[tokio::test]
    async fn a_gap_or_an_error_ends_the_stream_with_both_shapes() {
        let events = futures_util::stream::iter(vec![
            log(StreamKind::Stdout, b"hi", 0),
            Ok(OutputEvent::Gap { from: 2, to: 9 }),
            log(StreamKind::Stderr, b"", 9),
        ]);
        let lines: Vec<String> = api_frames(events)
            .map(|f| serde_json::to_string(&f).unwrap())
            .collect()
            .await;
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            r#"{"type":"log","stream":"STDOUT","data":"aGk=","encoding":"base64","at":"t"}"#
        );
        let v: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(
            v["errors"][0]["code"],
            "sandbox_process_output_not_retained"
        );
        assert!(v["error"]["message"].as_str().unwrap().contains("2..9"));
        let events = futures_util::stream::iter(vec![
            Err(EngineError::new(ErrorCode::Unavailable, "agent gone")),
            log(StreamKind::Stderr, b"x", 0),
        ]);
        let lines: Vec<serde_json::Value> = api_frames(events)
            .map(|f| serde_json::to_value(&f).unwrap())
            .collect()
            .await;
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["errors"][0]["code"], "compute_unavailable");
    }
}
