//! Reads a child's stdout and stderr until both close, handing every chunk to a sink
//! in the order the agent read it. Buffers exist only during a read.

use bytes::Bytes;
use sandboxd_agent_protocol::StreamKind;
use std::io;
use tokio::net::unix::pipe;

/// Largest single read; a chunk is at most this big.
pub(crate) const READ_SIZE: usize = 32 * 1024;

/// Reads both pipes until EOF on each. `sink` returns `false` to stop reading (the
/// pipes are then closed, which the writer sees as EPIPE).
pub(crate) async fn drain(
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
    mut sink: impl FnMut(StreamKind, Bytes) -> bool,
) {
    let mut out = Some(stdout);
    let mut err = Some(stderr);
    while out.is_some() || err.is_some() {
        let kind = tokio::select! {
            Some(r) = ready(&out) => r.map(|_| StreamKind::Stdout),
            Some(r) = ready(&err) => r.map(|_| StreamKind::Stderr),
            else => break,
        };
        let Ok(kind) = kind else { break };
        let slot = match kind {
            StreamKind::Stdout => &mut out,
            StreamKind::Stderr => &mut err,
        };
        match slot.as_ref().map(read_once) {
            Some(Ok(Some(data))) => {
                if !sink(kind, data) {
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
