//! Running a command in a sandbox for a create's `run` or an exec: a managed process
//! whose live output becomes events and, folded, the `result`.

use crate::body::{RunSpec, SHELL, SHELL_PURPOSE};
use crate::error::ApiError;
use crate::events::{Emitter, Event};
use crate::views::ResultView;
use futures_util::StreamExt;
use sandboxd_engine::{
    Engine, ExecEvent, OnCap, SandboxEnd, StreamCommand, StreamKind, WorkspaceId,
};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Output kept in a `result` and streamed (stdout and stderr together): every byte up
/// to it, in order; past it `truncated` is set and later output is dropped (the
/// command runs on).
pub const MAX_RESULT_OUTPUT: u64 = 4 * 1024 * 1024;

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
    engine: &Arc<Engine>,
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
    engine: &Arc<Engine>,
    ws: &WorkspaceId,
    id: Uuid,
    spec: &RunSpec,
    out: &mut Emitter,
    result: &mut ResultView,
) -> Result<(), ApiError> {
    let cmd = StreamCommand {
        argv: spec.argv()?,
        env: spec.env.clone().unwrap_or_default(),
        cwd: spec.cwd.clone(),
        // The page gives a run no timeout and no limit on commands at once.
        timeout: Duration::MAX,
        kill_grace: Duration::from_secs(30),
        max_output_bytes: MAX_RESULT_OUTPUT,
        on_cap: OnCap::Discard,
        max_sessions: usize::MAX,
    };
    let (exec_id, mut events) = match engine.exec_stream_with_id(ws, id, cmd).await {
        Ok(started) => started,
        Err(e) if spec.cmd.is_some() => {
            return Err(engine
                .explain_missing_shell(ws, id, SHELL, SHELL_PURPOSE, e)
                .await
                .into())
        }
        Err(e) => return Err(e.into()),
    };
    result.exec_id = exec_id.to_string();
    out.emit(Event::Started {
        exec_id: result.exec_id.clone(),
    })
    .await;
    let (mut so, mut se) = (Utf8Carry::default(), Utf8Carry::default());
    while let Some(event) = events.next().await {
        match event {
            ExecEvent::Output { stream, data } => {
                let (carry, buf) = match stream {
                    StreamKind::Stdout => (&mut so, &mut result.stdout),
                    StreamKind::Stderr => (&mut se, &mut result.stderr),
                };
                let text = carry.push(&data);
                buf.push_str(&text);
                if !text.is_empty() {
                    out.emit(match stream {
                        StreamKind::Stdout => Event::Stdout { data: text },
                        StreamKind::Stderr => Event::Stderr { data: text },
                    })
                    .await;
                }
            }
            ExecEvent::Exit(end) => {
                result.truncated = end.truncated;
                if let Some(why) = end.sandbox_ended {
                    return Err(ended_under_it(Some(why)));
                }
                result.exit_code = end.exit.map(|e| e.shell_code());
                return Ok(());
            }
        }
    }
    Err(ended_under_it(None))
}

/// The result's error when the sandbox ended before its command did, saying how.
fn ended_under_it(why: Option<SandboxEnd>) -> ApiError {
    let (code, message) = match why {
        Some(SandboxEnd::Expired) => (
            "TIMEOUT",
            "the sandbox reached its timeoutSeconds before the command finished",
        ),
        Some(SandboxEnd::Deleted) => (
            "SANDBOX_ENDED",
            "the sandbox was deleted before the command finished",
        ),
        Some(SandboxEnd::Stopped) | None => (
            "SANDBOX_ENDED",
            "the sandbox stopped before the command finished",
        ),
    };
    ApiError::new(axum::http::StatusCode::CONFLICT, code, message)
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
