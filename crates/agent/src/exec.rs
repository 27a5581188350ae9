//! Captured execution: run to completion, keep stdout/stderr up to a combined cap, kill
//! the whole process group on overflow or timeout.

use crate::drain::drain;
use crate::error::invalid;
use crate::reaper::Exit;
use crate::shared::{lock, Shared};
use crate::spawn::{kill_group, spawn, Launch};
use base64::Engine as _;
use sandboxd_agent_protocol::{AgentError, ExecRequest, ExecResult, StreamKind};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// Cap used when a request sends `max_output_bytes: 0`.
pub(crate) const DEFAULT_MAX_OUTPUT: u64 = sandboxd_agent_protocol::limits::DEFAULT_EXEC_OUTPUT;

#[derive(Default)]
struct Capture {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
}

/// Runs the command; `timeout_ms: 0` means no timeout.
pub(crate) async fn exec(shared: &Arc<Shared>, req: ExecRequest) -> Result<ExecResult, AgentError> {
    let cap = match req.max_output_bytes {
        0 => DEFAULT_MAX_OUTPUT,
        n => n,
    };
    if cap > usize::MAX as u64 / 2 {
        return Err(invalid("max_output_bytes is too large"));
    }
    let launch = Launch {
        argv: &req.argv,
        env: req.env.as_ref(),
        cwd: req.cwd.as_deref(),
        user: req.user.as_ref(),
    };
    let s = spawn(
        &launch,
        &shared.config.default_env,
        shared.config.confine.as_ref(),
    )?;
    let (pid, tag) = (s.pid, Uuid::new_v4());
    let capture = Arc::new(Mutex::new(Capture::default()));
    let (sink, cap_sink) = (shared.clone(), capture.clone());
    let (exited, exited_rx) = tokio::sync::watch::channel(false);
    let reader = tokio::spawn(drain(s.stdout, s.stderr, exited_rx, move |kind, data| {
        sink.log_output(tag, kind, data.clone(), std::time::SystemTime::now());
        let mut c = lock(&cap_sink);
        let room = (cap as usize).saturating_sub(c.stdout.len() + c.stderr.len());
        let keep = data.len().min(room);
        let buf = match kind {
            StreamKind::Stdout => &mut c.stdout,
            StreamKind::Stderr => &mut c.stderr,
        };
        buf.extend_from_slice(&data[..keep]);
        if keep < data.len() {
            c.truncated = true;
            kill_group(pid, libc::SIGKILL);
            return std::future::ready(false);
        }
        std::future::ready(true)
    }));
    // The host gave up on the call (its connection closed, dropping this future): the
    // command must not run on with nobody to end it.
    let mut orphaned = KillOnDrop(Some(pid));
    let mut exit_rx = s.exit;
    let mut timed_out = false;
    let exit = if req.timeout_ms == 0 {
        exit_rx.await
    } else {
        tokio::select! {
            e = &mut exit_rx => e,
            _ = tokio::time::sleep(Duration::from_millis(req.timeout_ms)) => {
                timed_out = true;
                kill_group(pid, libc::SIGKILL);
                exit_rx.await
            }
        }
    };
    orphaned.0 = None;
    exited.send_replace(true);
    let _ = reader.await;
    let c = std::mem::take(&mut *lock(&capture));
    let b64 = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
    let (exit_code, signal) = match exit.ok() {
        Some(Exit::Code(c)) => (Some(c), None),
        Some(Exit::Signal(s)) => (None, Some(s)),
        None => (None, None),
    };
    Ok(ExecResult {
        stdout: b64(&c.stdout),
        stderr: b64(&c.stderr),
        exit_code,
        signal,
        timed_out,
        output_truncated: c.truncated,
        pid,
    })
}

/// Kills a command's process group when dropped (an exec the host stopped waiting for).
struct KillOnDrop(Option<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            kill_group(pid, libc::SIGKILL);
        }
    }
}
