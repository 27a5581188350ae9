//! A connection's deadlines while it waits for a request, kept by its socket: a head
//! begun must be complete within the header-read timeout of its first byte, and a
//! connection with no request (new, or kept alive after one) is closed after the idle
//! timeout. hyper's own header-read timeout runs from when it starts waiting for a head,
//! so it closed a kept-alive connection 10 s after its last answer, and a browser sending
//! on it at that instant lost its request ("Failed to fetch": a console Pause once did);
//! with the idle timeout past clients' own (Go 90 s, Firefox 115 s, Chromium 300 s) the
//! client closes first. A request in progress, a response still being written out to a slow reader,
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
use tokio::time::Sleep;

/// The two deadlines of a connection waiting for a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitLimits {
    /// From the last request's end (or the connection's start) to a head's first byte.
    pub idle: Duration,
    /// From a head's first byte to its end.
    pub head: Duration,
}

/// A served connection's socket (a `TcpStream`), closed (its read fails) when a wait
/// deadline passes.
pub(crate) struct Waiting<S> {
    stream: S,
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

impl<S> Waiting<S> {
    pub(crate) fn new(stream: S, state: Arc<ConnState>, limits: WaitLimits) -> Self {
        Self {
            stream,
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

impl<S: AsyncRead + Unpin> AsyncRead for Waiting<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
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

impl<S: AsyncWrite + Unpin> AsyncWrite for Waiting<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let done = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.wrote(cx, &done);
        done
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let done = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.wrote(cx, &done);
        done
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let done = Pin::new(&mut this.stream).poll_flush(cx);
        this.wrote(cx, &done);
        done
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::served::{Place, Served};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// A served connection's socket over an in-memory pipe of `buffer` bytes, the
    /// client's end, and its place (which holds its state).
    fn watched(buffer: usize, limits: WaitLimits) -> (Waiting<DuplexStream>, DuplexStream, Place) {
        let place = Served::new(4).admit().expect("a place");
        let (ours, theirs) = tokio::io::duplex(buffer);
        (
            Waiting::new(ours, place.state.clone(), limits),
            theirs,
            place,
        )
    }

    /// Timers round to the millisecond, and the state keeps milliseconds.
    const SLACK: Duration = Duration::from_millis(5);

    #[tokio::test]
    async fn an_idle_connection_is_closed_at_the_idle_timeout_and_not_before() {
        let limits = WaitLimits {
            idle: Duration::from_millis(300),
            head: Duration::from_millis(100),
        };
        let (mut conn, _client, _place) = watched(1024, limits);
        let opened = Instant::now();
        let err = conn.read(&mut [0u8; 16]).await.expect_err("closed");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(
            opened.elapsed() + SLACK >= limits.idle,
            "{:?}",
            opened.elapsed()
        );
    }

    #[tokio::test]
    async fn a_head_begun_has_the_head_timeout_from_its_first_byte() {
        let limits = WaitLimits {
            idle: Duration::from_secs(30),
            head: Duration::from_millis(200),
        };
        let (mut conn, mut client, _place) = watched(1024, limits);
        tokio::time::sleep(Duration::from_millis(300)).await;
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let begun = Instant::now();
        let mut buf = [0u8; 64];
        assert_eq!(conn.read(&mut buf).await.expect("the first bytes"), 16);
        let err = conn.read(&mut buf).await.expect_err("closed");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let waited = begun.elapsed();
        assert!(waited + SLACK >= limits.head, "{waited:?}");
        assert!(
            waited < limits.idle,
            "closed by the idle timeout: {waited:?}"
        );
    }

    #[tokio::test]
    async fn a_write_waiting_for_a_slow_reader_holds_the_idle_wait_back() {
        let limits = WaitLimits {
            idle: Duration::from_millis(200),
            head: Duration::from_millis(100),
        };
        // 4 KiB through a 64-byte pipe: the write waits for the client, which reads
        // only after three idle timeouts. One task, as hyper reads and writes from one.
        let (conn, mut client, _place) = watched(64, limits);
        let (mut reads, mut writes) = tokio::io::split(conn);
        let served = async {
            writes.write_all(&[7u8; 4096]).await.expect("written");
        };
        let waited = async {
            let read = reads.read(&mut [0u8; 1]).await;
            (read, Instant::now())
        };
        let client_side = async {
            tokio::time::sleep(3 * limits.idle).await;
            let reading = Instant::now();
            let mut got = vec![0u8; 4096];
            client.read_exact(&mut got).await.expect("all of it");
            reading
        };
        let ((), (read, closed), reading) = tokio::join!(served, waited, client_side);
        assert_eq!(read.expect_err("closed").kind(), io::ErrorKind::TimedOut);
        // The write ended once the client read; the idle wait ran from there.
        assert!(
            closed + SLACK >= reading + limits.idle,
            "closed {:?} before the client read",
            reading.checked_duration_since(closed)
        );
    }
}
