//! A request body's pace: a client must keep sending while the server waits for its
//! body, or the body fails with [`BodyTooSlow`] and the connection is freed. Without it a
//! client that sends its headers, then one byte every few seconds, holds a connection (and
//! a slot of the server's connection cap) for as long as its declared length allows.
//!
//! The rule is a token bucket of waiting time: a body starts with `grace` of it; each byte
//! received earns `1 / min_rate` seconds more, up to `grace` banked; only time the server
//! spends waiting for the client is spent (time the handler takes to consume what arrived,
//! writing an upload into a slow sandbox say, never counts against the client). So a
//! client sending at least `min_rate` bytes a second, however long its body, is never
//! cut, and one that stops is cut `grace` after its last byte at the latest.

use axum::body::Body;
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The pace a request body must keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyPace {
    /// Waiting time a body starts with, and the most it can bank.
    pub grace: Duration,
    /// Bytes a second that earn a second of waiting (0: no pace is required).
    pub min_rate: u64,
}

impl Default for BodyPace {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(20),
            min_rate: 500,
        }
    }
}

/// A request body that came slower than its [`BodyPace`].
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the request body came too slowly: cut after waiting {waited_secs} s for more of it \
     (a body must keep sending at least {min_rate} bytes a second)"
)]
pub struct BodyTooSlow {
    pub waited_secs: u64,
    pub min_rate: u64,
}

impl BodyTooSlow {
    /// Whether `err` or an error it wraps (an `axum::Error`, a boxed error) is a body
    /// that came too slowly.
    pub fn in_chain<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTooSlow> {
        let mut cur = Some(err);
        while let Some(e) = cur {
            if let Some(slow) = e.downcast_ref::<BodyTooSlow>() {
                return Some(slow);
            }
            cur = e.source();
        }
        None
    }
}

/// `err` of a request body as an I/O error for a byte stream: `TimedOut` for a body that
/// came too slowly (the engine answers that as the client's timeout), `Other` otherwise.
pub fn body_io_error(err: axum::Error) -> std::io::Error {
    let kind = if BodyTooSlow::in_chain(&err).is_some() {
        std::io::ErrorKind::TimedOut
    } else {
        std::io::ErrorKind::Other
    };
    std::io::Error::new(kind, err)
}

/// `body`, failing with [`BodyTooSlow`] once it falls behind `pace`.
pub fn paced(body: Body, pace: BodyPace) -> Body {
    if pace.min_rate == 0 {
        return body;
    }
    Body::new(PacedBody {
        inner: body,
        pace,
        banked: pace.grace,
        waiting_since: None,
        deadline: None,
    })
}

struct PacedBody {
    inner: Body,
    pace: BodyPace,
    /// Waiting time left (as of `waiting_since`, when waiting).
    banked: Duration,
    /// When the server started waiting for the client's next frame.
    waiting_since: Option<Instant>,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl PacedBody {
    /// A frame of `len` bytes arrived: spend the time waited, earn the bytes' time.
    fn arrived(&mut self, len: usize) {
        if let Some(since) = self.waiting_since.take() {
            self.banked = self.banked.saturating_sub(since.elapsed());
        }
        self.deadline = None;
        let earned = Duration::from_secs_f64(len as f64 / self.pace.min_rate as f64);
        self.banked = self.banked.saturating_add(earned).min(self.pace.grace);
    }
}

impl http_body::Body for PacedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.arrived(frame.data_ref().map_or(0, Bytes::len));
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => {
                this.waiting_since = None;
                this.deadline = None;
                Poll::Ready(other)
            }
            Poll::Pending => {
                let since = *this.waiting_since.get_or_insert_with(Instant::now);
                let banked = this.banked;
                let deadline = this
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(since + banked)));
                ready!(deadline.as_mut().poll(cx));
                let waited = since.elapsed().as_secs();
                tracing::debug!(
                    waited,
                    "a request body came too slowly; its connection ends"
                );
                Poll::Ready(Some(Err(axum::Error::new(BodyTooSlow {
                    waited_secs: waited,
                    min_rate: this.pace.min_rate,
                }))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    //! Real time, short pauses: under load a pause only grows, which cuts a slow body
    //! sooner, and the bodies that must pass keep a wide margin.
    use super::*;
    use http_body_util::BodyExt;

    fn pace(grace_ms: u64, min_rate: u64) -> BodyPace {
        BodyPace {
            grace: Duration::from_millis(grace_ms),
            min_rate,
        }
    }

    /// A body of `n` chunks of `bytes`, each arriving after `pause_ms`.
    fn dribbled(n: usize, pause_ms: u64, bytes: &'static [u8]) -> Body {
        let stream = futures_util::stream::unfold(n, move |left| async move {
            if left == 0 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(bytes)), left - 1))
        });
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn a_body_that_stops_is_cut_after_its_grace() {
        let body = paced(dribbled(1, 3_600_000, b"late"), pace(200, 100));
        let err = body.collect().await.expect_err("cut");
        assert!(BodyTooSlow::in_chain(&err).is_some(), "{err}");
        assert!(err.to_string().contains("100 bytes a second"), "{err}");
    }

    #[tokio::test]
    async fn a_dribble_below_the_rate_is_cut_even_though_bytes_keep_coming() {
        // A byte every 50 ms earns 1 ms at 1000 B/s: 300 ms of grace lasts ~6 bytes of
        // the 200 (which would take 10 s).
        let mut body = paced(dribbled(200, 50, b"x"), pace(300, 1000));
        let mut got = 0;
        let err = loop {
            match body.frame().await {
                Some(Ok(_)) => got += 1,
                Some(Err(e)) => break e,
                None => panic!("a dribble below the rate was never cut"),
            }
        };
        assert!(BodyTooSlow::in_chain(&err).is_some(), "{err}");
        assert!(got < 200);
    }

    #[tokio::test]
    async fn a_body_at_the_rate_is_never_cut() {
        // 1000 bytes every 20 ms at 100 B/s earns 10 s a chunk (banked up to the grace).
        const KB: &[u8] = &[b'y'; 1000];
        let body = paced(dribbled(50, 20, KB), pace(5000, 100));
        assert_eq!(
            body.collect().await.expect("whole").to_bytes().len(),
            50_000
        );
    }

    #[tokio::test]
    async fn time_the_reader_takes_is_not_the_clients() {
        // Each chunk keeps the server waiting 20 ms (60 ms of a 150 ms grace in all; a byte
        // earns a microsecond), and the handler then takes 300 ms over it: counted against
        // the client, the time between frames would cut the body at its second chunk.
        let mut body = paced(dribbled(3, 20, b"z"), pace(150, 1_000_000));
        let mut n = 0;
        while let Some(frame) = body.frame().await {
            frame.expect("never cut");
            n += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert_eq!(n, 3);
    }

    #[tokio::test]
    async fn no_rate_means_no_pace() {
        let got = paced(dribbled(1, 300, b"late"), pace(10, 0))
            .collect()
            .await;
        assert_eq!(got.expect("whole").to_bytes(), "late");
    }
}
