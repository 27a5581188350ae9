//! A connection's deadlines while it waits for a request, kept by its socket: a head
//! begun must be complete within the header-read timeout of its first byte, and a
//! connection with no request (new, or kept alive after one) is closed after the idle
//! timeout. hyper's own header-read timeout runs from when it starts waiting for a head,
//! so it closed a kept-alive connection 10 s after its last answer, and a browser sending
//! on it at that instant lost its request ("Failed to fetch": a console Pause once did);
//! with the idle timeout past clients' own (Go 90 s, Firefox 115 s) the client closes
//! first. A request in progress, and an upgraded connection, have neither deadline.

use crate::served::ConnState;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// The two deadlines of a connection waiting for a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitLimits {
    /// From the last request's end (or the connection's start) to a head's first byte.
    pub idle: Duration,
    /// From a head's first byte to its end.
    pub head: Duration,
}

/// A served connection's socket, closed (its read fails) when a wait deadline passes.
pub(crate) struct Waiting {
    tcp: TcpStream,
    state: Arc<ConnState>,
    limits: WaitLimits,
    /// The deadline armed, and its timer (made at the first wait).
    timer: Option<(Instant, Pin<Box<Sleep>>)>,
}

impl Waiting {
    pub(crate) fn new(tcp: TcpStream, state: Arc<ConnState>, limits: WaitLimits) -> Self {
        Self {
            tcp,
            state,
            limits,
            timer: None,
        }
    }

    /// With nothing to read: whether the wait's deadline has passed (else the timer is
    /// armed to wake the reader at it).
    fn deadline_passed(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.state.wait_deadline(self.limits.idle, self.limits.head) else {
            return false;
        };
        let sleep = match &mut self.timer {
            Some((armed, sleep)) => {
                if *armed != deadline {
                    sleep.as_mut().reset(deadline.into());
                    *armed = deadline;
                }
                sleep
            }
            None => {
                let sleep = Box::pin(tokio::time::sleep_until(deadline.into()));
                &mut self.timer.insert((deadline, sleep)).1
            }
        };
        sleep.as_mut().poll(cx).is_ready()
    }
}

impl AsyncRead for Waiting {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.tcp).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.state.bytes_arrived();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if this.deadline_passed(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection waited past its deadline for a request",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Waiting {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}
