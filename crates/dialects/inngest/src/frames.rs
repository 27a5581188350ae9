//! NDJSON frames of the log and output streams: `log` chunks and a terminal `error`.

use crate::error::{status_and_code, ErrorItem};
use crate::views::{chunk, ChunkView};
use axum::http::StatusCode;
use futures_util::{Stream, StreamExt};
use sandboxd_engine::{EngineError, ErrorCode, Frame};
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

/// Status and Inngest code for an error frame the engine or agent sent mid-stream.
pub fn frame_error(code: &str) -> (StatusCode, &'static str) {
    let engine_code = [
        ErrorCode::ProcessNotFound,
        ErrorCode::OutputNotRetained,
        ErrorCode::SandboxNotFound,
        ErrorCode::Internal,
    ]
    .into_iter()
    .find(|c| c.as_str() == code);
    engine_code.map_or(
        (StatusCode::SERVICE_UNAVAILABLE, "compute_unavailable"),
        status_and_code,
    )
}

/// Turns engine frames into API frames: chunks pass, exit and lag markers are dropped
/// (the stream has no loss marker), an error ends the stream.
pub fn api_frames<S>(frames: S) -> impl Stream<Item = StreamFrame> + Send + 'static
where
    S: Stream<Item = Result<Frame, EngineError>> + Send + 'static,
{
    frames
        .map(|item| match item {
            Ok(Frame::Error { code, message }) => {
                Some(StreamFrame::error(frame_error(&code).1, message))
            }
            Ok(frame) => chunk(&frame).map(StreamFrame::Log),
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
    use sandboxd_engine::StreamKind;

    #[tokio::test]
    async fn error_ends_the_stream_with_both_shapes() {
        let frames = futures_util::stream::iter(vec![
            Ok(Frame::Log {
                stream: StreamKind::Stdout,
                data: "aGk=".into(),
                at: "t".into(),
                process: None,
            }),
            Ok(Frame::Lagged { skipped: 3 }),
            Ok(Frame::Error {
                code: "unavailable".into(),
                message: "agent gone".into(),
            }),
            Ok(Frame::Log {
                stream: StreamKind::Stderr,
                data: "".into(),
                at: "t".into(),
                process: None,
            }),
        ]);
        let lines: Vec<String> = api_frames(frames)
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
        assert_eq!(v["errors"][0]["code"], "compute_unavailable");
        assert_eq!(v["error"]["message"], "agent gone");
    }
}
