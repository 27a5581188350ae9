//! An open terminal: a login shell's screen output and exit, and keystrokes and resizes
//! to it, in the engine's own types (the agent's PTY framing stays inside the engine).

use crate::auto_pause::Busy;
use crate::in_flight::InFlightSlot;
use bytes::{Bytes, BytesMut};
use sandboxd_agent_protocol::pty::{PtyFrame, PtyIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};

/// Room made for each read from the agent (the agent's frames carry up to 64 KiB).
const READ_CHUNK: usize = 64 * 1024;

/// A shell on a PTY; [`Terminal::split`] it to read and write at once. Dropping both
/// halves hangs the shell up.
pub struct Terminal {
    io: PtyIo,
    busy: (Busy, InFlightSlot),
}

/// What a terminal shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalEvent {
    /// Screen output, exactly as read.
    Output(Bytes),
    /// The shell exited with this code (the last event).
    Exit(i32),
    /// The key that opened the terminal was revoked (the last event): the terminal
    /// closes, which hangs its shell up as a client that leaves does.
    KeyRevoked,
}

/// The reading half: screen output, then the exit.
pub struct TerminalOutput {
    rd: ReadHalf<PtyIo>,
    buf: BytesMut,
    /// The sandbox is in use while its screen is read (never idle for autoPause), and
    /// the terminal holds one of its workspace's places in flight.
    busy: (Busy, InFlightSlot),
    /// `KeyRevoked` was returned: nothing follows it.
    revoked: bool,
}

/// The writing half: keystrokes and resizes.
pub struct TerminalInput {
    wr: WriteHalf<PtyIo>,
}

impl Terminal {
    pub(crate) fn new(io: PtyIo, busy: (Busy, InFlightSlot)) -> Self {
        Terminal { io, busy }
    }

    pub fn split(self) -> (TerminalOutput, TerminalInput) {
        let (rd, wr) = tokio::io::split(self.io);
        let out = TerminalOutput {
            rd,
            buf: BytesMut::with_capacity(READ_CHUNK),
            busy: self.busy,
            revoked: false,
        };
        (out, TerminalInput { wr })
    }
}

impl TerminalOutput {
    /// The next event; `None` when the connection ended without an exit (or broke).
    pub async fn next(&mut self) -> Option<TerminalEvent> {
        if self.revoked {
            return None;
        }
        let slot = &self.busy.1;
        let read = read_event(&mut self.rd, &mut self.buf);
        tokio::select! {
            biased;
            () = slot.revoked() => {
                self.revoked = true;
                Some(TerminalEvent::KeyRevoked)
            }
            event = read => event,
        }
    }
}

/// The next event read from the agent (see [`TerminalOutput::next`]).
async fn read_event(rd: &mut ReadHalf<PtyIo>, buf: &mut BytesMut) -> Option<TerminalEvent> {
    loop {
        match PtyFrame::decode(buf) {
            Ok(Some(PtyFrame::Data(d))) => return Some(TerminalEvent::Output(d)),
            Ok(Some(PtyFrame::Exit(code))) => return Some(TerminalEvent::Exit(code)),
            Ok(Some(PtyFrame::Resize { .. })) => {}
            Ok(None) => {
                // Without this a full buffer would be grown 64 bytes at a time
                // (`BytesMut`'s default), one read each.
                buf.reserve(READ_CHUNK);
                if !matches!(rd.read_buf(buf).await, Ok(1..)) {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
}

impl TerminalInput {
    /// Sends keystrokes.
    pub async fn write(&mut self, data: Bytes) -> std::io::Result<()> {
        self.wr.write_all(&PtyFrame::Data(data).encode()).await
    }

    /// Resizes the PTY to `cols`×`rows`.
    pub async fn resize(&mut self, cols: u16, rows: u16) -> std::io::Result<()> {
        let frame = PtyFrame::Resize { cols, rows };
        self.wr.write_all(&frame.encode()).await
    }
}
