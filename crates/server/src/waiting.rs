//! A connection's deadlines while it waits for a request, kept by its socket: a head
//! begun must be complete within the header-read timeout of its first byte, and a
//! connection with no request (new, or kept alive after one) is closed after the idle
//! timeout. hyper's own header-read timeout runs from when it starts waiting for a head,
//! so it closed a kept-alive connection 10 s after its last answer, and a browser sending
//! on it at that instant lost its request ("Failed to fetch": a console Pause once did);
//! with the idle timeout past clients' own (Go 90 s, Firefox 115 s) the client closes
//! first. A request in progress, a response still being written out to a slow reader,
//! and an upgraded connection have neither deadline. A head pipelined behind a request
//! (its bytes read while that request was in progress) waits as an idle connection does.

use crate::served::{ConnState, Wait};
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
    /// A write is waiting for the client to take what is sent: no deadline runs (hyper
    /// may hold the rest of a last response, whose request is over, for a slow reader).
    writing: bool,
    /// When the socket last took bytes: the idle wait runs from it too.
    wrote_at: Instant,
    /// The deadline armed, and its timer (made at the first wait).
    timer: Option<(Instant, Pin<Box<Sleep>>)>,
}

impl Waiting {
    pub(crate) fn new(tcp: TcpStream, state: Arc<ConnState>, limits: WaitLimits) -> Self {
        Self {
            tcp,
            state,
            limits,
            writing: false,
            wrote_at: Instant::now(),
            timer: None,
        }
    }

    /// When the connection is closed if no request begins (or its head ends) first.
    fn deadline(&self) -> Option<Instant> {
        if self.writing {
            return None;
        }
        Some(match self.state.waiting()? {
            Wait::Idle(since) => since.max(self.wrote_at) + self.limits.idle,
            Wait::Head(since) => since + self.limits.head,
        })
    }

    /// Whether the wait's deadline has passed; else a timer is armed to wake the
    /// connection's task at it. Called when a read finds nothing and when a write ends:
    /// hyper ends a request (the last of its response taken) before it writes that out,
    /// and then waits for the next head without reading again until woken. The timer is
    /// moved only to an earlier deadline (a head begun) or once it has gone off: a
    /// connection kept alive by frequent requests resets it about once per idle
    /// timeout, not per request (an early alarm wakes the task, which looks again).
    fn deadline_passed(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.deadline() else {
            return false;
        };
        if Instant::now() >= deadline {
            return true;
        }
        let (armed, sleep) = self.timer.get_or_insert_with(|| {
            (
                deadline,
                Box::pin(tokio::time::sleep_until(deadline.into())),
            )
        });
        if *armed > deadline || sleep.is_elapsed() {
            sleep.as_mut().reset(deadline.into());
            *armed = deadline;
        }
        if sleep.as_mut().poll(cx).is_ready() {
            // Gone off in the instant before the deadline: once more, just past it.
            let later = deadline + Duration::from_millis(1);
            sleep.as_mut().reset(later.into());
            *armed = later;
            let _ = sleep.as_mut().poll(cx);
        }
        false
    }

    /// Notes how a write went, and arms the wait's timer when it left the connection
    /// waiting (a deadline already passed wakes the task, whose read then fails).
    fn wrote<T>(&mut self, cx: &mut Context<'_>, done: &Poll<io::Result<T>>) {
        self.writing = done.is_pending();
        if let Poll::Ready(Ok(_)) = done {
            self.wrote_at = Instant::now();
            if self.deadline_passed(cx) {
                cx.waker().wake_by_ref();
            }
        }
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
        let this = self.get_mut();
        let done = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.wrote(cx, &done);
        done
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let done = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.wrote(cx, &done);
        done
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let done = Pin::new(&mut this.tcp).poll_flush(cx);
        this.wrote(cx, &done);
        done
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}
