//! Running a command in a sandbox for a create's `run` or an exec: a managed process
//! whose live output becomes events and, folded, the `result`.

use crate::body::RunSpec;
use crate::error::ApiError;
use crate::events::{Emitter, Event};
use crate::views::ResultView;
use base64::Engine as _;
use futures_util::StreamExt;
use sandboxd_engine::{Engine, Frame, StartCommand, StreamKind, WorkspaceId};
use uuid::Uuid;

/// Output kept in a `result` (stdout and stderr together); past it `truncated` is set
/// and later output is dropped (the command runs on).
pub const MAX_RESULT_OUTPUT: usize = 4 * 1024 * 1024;

/// Turns byte chunks into UTF-8 text, carrying a character split across chunks.
#[derive(Default)]
struct Utf8Carry(Vec<u8>);

impl Utf8Carry {
    fn push(&mut self, chunk: &[u8]) -> String {
        self.0.extend_from_slice(chunk);
        let cut = match std::str::from_utf8(&self.0) {
            Ok(_) => self.0.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.0.len(),
        };
        let rest = self.0.split_off(cut);
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0 = rest;
        text
    }
}

/// Runs `spec` in sandbox `id`, emitting `Started`, output and one `Exit` event;
/// returns the folded result. Failures become the result's `error`.
pub async fn run(
    engine: &Engine,
    ws: &WorkspaceId,
    id: Uuid,
    spec: &RunSpec,
    out: &mut Emitter,
) -> ResultView {
    let mut result = ResultView::default();
    if let Err(e) = drive(engine, ws, id, spec, out, &mut result).await {
        result.error = Some(e.body);
    }
    out.emit(Event::Exit {
        exec_id: result.exec_id.clone(),
        exit_code: result.exit_code,
        truncated: result.truncated,
        error: result.error.clone(),
    })
    .await;
    result
}

async fn drive(
    engine: &Engine,
    ws: &WorkspaceId,
    id: Uuid,
    spec: &RunSpec,
    out: &mut Emitter,
    result: &mut ResultView,
) -> Result<(), ApiError> {
    let env = engine.command_env(ws, id, &spec.env.clone().unwrap_or_default())?;
    let cmd = StartCommand {
        argv: spec.argv()?,
        env: Some(env),
        cwd: spec.cwd.clone(),
    };
    let info = engine.start_process(ws, id, cmd).await?;
    result.exec_id = info.id.to_string();
    out.emit(Event::Started {
        exec_id: result.exec_id.clone(),
    })
    .await;
    let mut frames = engine.process_output(ws, id, info.id, 0, true).await?;
    let (mut so, mut se) = (Utf8Carry::default(), Utf8Carry::default());
    let mut kept = 0usize;
    while let Some(frame) = frames.next().await {
        match frame? {
            Frame::Log { stream, data, .. } => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap_or_default();
                if kept + bytes.len() > MAX_RESULT_OUTPUT {
                    result.truncated = true;
                    continue;
                }
                kept += bytes.len();
                let (carry, buf) = match stream {
                    StreamKind::Stdout => (&mut so, &mut result.stdout),
                    StreamKind::Stderr => (&mut se, &mut result.stderr),
                };
                let text = carry.push(&bytes);
                buf.push_str(&text);
                if !text.is_empty() {
                    out.emit(match stream {
                        StreamKind::Stdout => Event::Stdout { data: text },
                        StreamKind::Stderr => Event::Stderr { data: text },
                    })
                    .await;
                }
            }
            Frame::Exit { info } => {
                result.exit_code = info.exit_code.or(info.signal.map(|s| 128 + s));
                return Ok(());
            }
            Frame::Lagged { .. } => result.truncated = true,
            Frame::Error { code, message } => {
                return Err(ApiError::new(
                    axum::http::StatusCode::BAD_GATEWAY,
                    "EXEC_FAILED",
                    format!("{code}: {message}"),
                ))
            }
        }
    }
    Err(ApiError::new(
        axum::http::StatusCode::CONFLICT,
        "SANDBOX_ENDED",
        "the sandbox ended before the command finished",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carries_split_characters() {
        let mut c = Utf8Carry::default();
        let euro = "€".as_bytes();
        assert_eq!(c.push(&euro[..1]), "");
        assert_eq!(c.push(&euro[1..]), "€");
        assert_eq!(c.push(b"a\xffb"), "a\u{fffd}b");
    }
}
