//! Reads a child's stdout and stderr until both close, handing every chunk to a sink
//! in the order the agent read it. The sink may take its time (back-pressure: the pipes
//! are not read meanwhile, so the child blocks on a full pipe instead of output being
//! dropped). Buffers exist only during a read.

use crate::shared::DRAIN_GRACE;
use bytes::Bytes;
use sandboxd_agent_protocol::StreamKind;
use std::future::Future;
use std::io;
use std::time::Duration;
use tokio::net::unix::pipe;
use tokio::sync::watch;
use tokio::time::Instant;

/// Largest single read; a chunk is at most this big.
pub(crate) const READ_SIZE: usize = 32 * 1024;

/// Reads both pipes until EOF on each. `sink` returns `false` to stop reading (the
/// pipes are then closed, which the writer sees as EPIPE). Once `exited` turns true
/// (the child was reaped), the pipes get [`DRAIN_GRACE`] of waiting in all to reach
/// EOF: a descendant holding them open must not keep the drain going. Time the sink
/// takes does not count.
pub(crate) async fn drain<F, Fut>(
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
    mut exited: watch::Receiver<bool>,
    mut sink: F,
) where
    F: FnMut(StreamKind, Bytes) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut out = Some(stdout);
    let mut err = Some(stderr);
    // Waiting time left once the child exited.
    let mut budget: Option<Duration> = None;
    while out.is_some() || err.is_some() {
        if budget.is_none() && *exited.borrow() {
            budget = Some(DRAIN_GRACE);
        }
        let waiting = Instant::now();
        let kind = tokio::select! {
            Some(r) = ready(&out) => r.map(|_| StreamKind::Stdout),
            Some(r) = ready(&err) => r.map(|_| StreamKind::Stderr),
            _ = exited.wait_for(|e| *e), if budget.is_none() => {
                budget = Some(DRAIN_GRACE);
                continue;
            }
            _ = tokio::time::sleep(budget.unwrap_or_default()), if budget.is_some() => break,
        };
        if let Some(b) = budget.as_mut() {
            *b = b.saturating_sub(waiting.elapsed());
        }
        let Ok(kind) = kind else { break };
        let slot = match kind {
            StreamKind::Stdout => &mut out,
            StreamKind::Stderr => &mut err,
        };
        match slot.as_ref().map(read_once) {
            Some(Ok(Some(data))) => {
                if !sink(kind, data).await {
                    return;
                }
            }
            Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
            Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            _ => *slot = None,
        }
    }
}

async fn ready(rx: &Option<pipe::Receiver>) -> Option<io::Result<()>> {
    match rx {
        Some(rx) => Some(rx.readable().await),
        None => None,
    }
}

/// One non-blocking read; `Ok(None)` at EOF. The result is sized to what was read.
fn read_once(rx: &pipe::Receiver) -> io::Result<Option<Bytes>> {
    let mut buf = vec![0u8; READ_SIZE];
    let n = rx.try_read(&mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    Ok(Some(Bytes::copy_from_slice(&buf[..n])))
}
