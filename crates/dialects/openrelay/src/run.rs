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

    /// At the end of the output: what is still carried (a character the output ended
    /// part-way through) as U+FFFD, since no more bytes will complete it.
    fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0.clear();
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
    let mut carries = Carries::default();
    while let Some(event) = events.next().await {
        match event {
            ExecEvent::Output { stream, data } => {
                let text = carries.of(stream).push(&data);
                deliver(stream, text, out, result).await;
            }
            ExecEvent::Exit(end) => {
                carries.finish(out, result).await;
                result.truncated = end.truncated;
                if let Some(why) = end.sandbox_ended {
                    return Err(ended_under_it(Some(why)));
                }
                result.exit_code = end.exit.map(|e| e.shell_code());
                return Ok(());
            }
            // The key was revoked: the result says so (401's code); the command runs on.
            ExecEvent::KeyRevoked => {
                carries.finish(out, result).await;
                return Err(sandboxd_engine::key_revoked().into());
            }
        }
    }
    carries.finish(out, result).await;
    Err(ended_under_it(None))
}

/// The carry of each stream.
#[derive(Default)]
struct Carries {
    stdout: Utf8Carry,
    stderr: Utf8Carry,
}

impl Carries {
    fn of(&mut self, stream: StreamKind) -> &mut Utf8Carry {
        match stream {
            StreamKind::Stdout => &mut self.stdout,
            StreamKind::Stderr => &mut self.stderr,
        }
    }

    /// Delivers what each stream still carries once its output has ended.
    async fn finish(&mut self, out: &mut Emitter, result: &mut ResultView) {
        for stream in [StreamKind::Stdout, StreamKind::Stderr] {
            let text = self.of(stream).finish();
            deliver(stream, text, out, result).await;
        }
    }
}

/// Appends `text` to the result's stream and emits it as an event (unless empty).
async fn deliver(stream: StreamKind, text: String, out: &mut Emitter, result: &mut ResultView) {
    if text.is_empty() {
        return;
    }
    let buf = match stream {
        StreamKind::Stdout => &mut result.stdout,
        StreamKind::Stderr => &mut result.stderr,
    };
    buf.push_str(&text);
    out.emit(match stream {
        StreamKind::Stdout => Event::Stdout { data: text },
        StreamKind::Stderr => Event::Stderr { data: text },
    })
    .await;
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

    #[test]
    fn a_character_cut_by_the_end_becomes_a_replacement() {
        let mut c = Utf8Carry::default();
        assert_eq!(c.push(b"ab\xe2\x82"), "ab");
        assert_eq!(c.finish(), "\u{fffd}");
        assert_eq!(c.finish(), "", "finished: nothing is carried any more");
    }
}
