//! The connections the server serves: at most the cap of them. A connection that waits
//! for a request's head (one that never sent one, or sits between keep-alive requests)
//! holds its place only while no newcomer needs it: at the cap, a new connection takes
//! the place of the one idle longest, which is closed. So connections that send nothing
//! (or half a head) cannot lock everyone out by holding every place: an outside
//! audit's 5,000 of them, reconnecting as soon as closed, left other clients
//! unanswered. Only when every connection has a request in progress is a
//! newcomer answered 503. A connection whose place is taken closes gracefully: what it
//! still has buffered of its last response is sent first (a body is done, for the
//! count, once hyper has taken its last bytes, not once they left). A keep-alive
//! client whose idle connection is so closed sees
//! what any server's idle timeout gives it (a closed connection to open again); one
//! whose next request head arrives in the instant its place is taken loses that
//! request with the connection (only at the cap, under such a crowd).

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// `busy` of a connection that gave its place up.
const EVICTED: i64 = i64::MIN;

/// One served connection's state, shared by its task and the registry.
pub(crate) struct ConnState {
    /// Requests in progress (0: waiting for a head; [`EVICTED`]: its place is taken).
    busy: AtomicI64,
    /// When it was last left with no request (ms since the registry's start).
    idle_since: AtomicU64,
    /// When the first bytes of its next request's head came while it had no request
    /// (ms since the registry's start, plus 1; 0: none yet).
    head_since: AtomicU64,
    /// Its connection was upgraded (a WebSocket): the wait deadlines end.
    upgraded: AtomicBool,
    /// Told once its place is taken: the connection closes.
    evicted: Notify,
    start: Instant,
}

impl ConnState {
    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// A request's head arrived; the returned guard ends it when dropped (with its
    /// response's body, or the request's handling).
    pub(crate) fn request_began(self: &Arc<Self>) -> RequestGuard {
        self.head_since.store(0, Ordering::Release);
        let _ = self
            .busy
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b != EVICTED).then(|| b + 1)
            });
        RequestGuard(self.clone())
    }

    /// Bytes came from the client: the first while it has no request in progress begin
    /// a request's head (bytes while one is in progress are its body's, or a pipelined
    /// head's, which then waits as an idle connection does).
    pub(crate) fn bytes_arrived(&self) {
        if self.head_since.load(Ordering::Acquire) == 0 && self.busy.load(Ordering::Acquire) == 0 {
            self.head_since.store(self.now() + 1, Ordering::Release);
        }
    }

    /// The connection was upgraded: it is no longer waiting for requests.
    pub(crate) fn upgraded(&self) {
        self.upgraded.store(true, Ordering::Release);
    }

    /// Since when the connection has waited, and for what; `None` while a request is in
    /// progress, once upgraded, or once its place was taken (it is closing).
    pub(crate) fn waiting(&self) -> Option<Wait> {
        if self.upgraded.load(Ordering::Acquire) || self.busy.load(Ordering::Acquire) != 0 {
            return None;
        }
        let at = |ms: u64| self.start + Duration::from_millis(ms);
        Some(match self.head_since.load(Ordering::Acquire) {
            0 => Wait::Idle(at(self.idle_since.load(Ordering::Acquire))),
            begun => Wait::Head(at(begun - 1)),
        })
    }

    /// Waits until the connection's place is taken.
    pub(crate) async fn evicted(&self) {
        self.evicted.notified().await
    }
}

/// What a connection with no request in progress waits for, since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// A request's first byte, since its last request ended (or it opened).
    Idle(Instant),
    /// The rest of a head, since its first byte.
    Head(Instant),
}

/// A request in progress on a connection (see [`ConnState::request_began`]).
pub(crate) struct RequestGuard(Arc<ConnState>);

impl RequestGuard {
    /// Its answer upgrades the connection (see [`ConnState::upgraded`]).
    pub(crate) fn upgraded(&self) {
        self.0.upgraded();
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let state = &self.0;
        // The time first: a look between the two must not rank it idle since before
        // its request.
        state.idle_since.store(state.now(), Ordering::Release);
        let _ = state
            .busy
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b != EVICTED && b > 0).then(|| b - 1)
            });
    }
}

/// A response body that keeps its request in progress until it is sent (or dropped).
pub(crate) fn guarded(body: Body, guard: RequestGuard) -> Body {
    Body::new(Guarded {
        inner: body,
        _guard: guard,
    })
}

struct Guarded {
    inner: Body,
    _guard: RequestGuard,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The registry of served connections.
pub(crate) struct Served {
    max: usize,
    start: Instant,
    conns: Mutex<(u64, HashMap<u64, Arc<ConnState>>)>,
    ended: Notify,
}

/// A connection's place; given back when dropped.
pub(crate) struct Place {
    served: Arc<Served>,
    id: u64,
    pub(crate) state: Arc<ConnState>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut conns = self.served.conns.lock().unwrap_or_else(|p| p.into_inner());
        conns.1.remove(&self.id);
        if conns.1.is_empty() {
            self.served.ended.notify_waiters();
        }
    }
}

impl Served {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Served {
            max,
            start: Instant::now(),
            conns: Mutex::new((0, HashMap::new())),
            ended: Notify::new(),
        })
    }

    /// A place for a new connection: a free one, else the place of the connection idle
    /// longest (told to close); `None` when every connection has a request in progress.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Place> {
        let mut guard = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        let (next, conns) = &mut *guard;
        if conns.len() >= self.max {
            // The longest idle whose place is still free to take: one pass for it, and
            // another only when a request began on it since the look.
            let id = loop {
                let (_, id) = conns
                    .iter()
                    .filter(|(_, c)| c.busy.load(Ordering::Acquire) == 0)
                    .map(|(id, c)| (c.idle_since.load(Ordering::Acquire), *id))
                    .min()?;
                let free = conns[&id].busy.compare_exchange(
                    0,
                    EVICTED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                if free.is_ok() {
                    break id;
                }
            };
            if let Some(old) = conns.remove(&id) {
                old.evicted.notify_one();
            }
        }
        *next += 1;
        let state = Arc::new(ConnState {
            busy: AtomicI64::new(0),
            idle_since: AtomicU64::new(self.start.elapsed().as_millis() as u64),
            head_since: AtomicU64::new(0),
            upgraded: AtomicBool::new(false),
            evicted: Notify::new(),
            start: self.start,
        });
        conns.insert(*next, state.clone());
        Some(Place {
            served: self.clone(),
            id: *next,
            state,
        })
    }

    /// Waits until no connection holds a place.
    pub(crate) async fn all_ended(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self
                .conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .1
                .is_empty()
            {
                return;
            }
            ended.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_longest_idle_gives_its_place_and_a_busy_one_never() {
        let served = Served::new(2);
        let first = served.admit().expect("a free place");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let second = served.admit().expect("a free place");
        // Both idle: the first (idle longer) gives its place.
        let third = served.admit().expect("an idle one's place");
        assert_eq!(first.state.busy.load(Ordering::Acquire), EVICTED);
        assert_ne!(second.state.busy.load(Ordering::Acquire), EVICTED);
        // Both left busy: no place.
        let _a = second.state.request_began();
        let _b = third.state.request_began();
        assert!(served.admit().is_none(), "a busy connection gave its place");
        drop(_a);
        assert!(
            served.admit().is_some(),
            "the one idle again gives its place"
        );
        // An evicted connection's late request does not make it busy again.
        drop(first.state.request_began());
        assert_eq!(first.state.busy.load(Ordering::Acquire), EVICTED);
    }

    #[test]
    fn a_waiting_connection_waits_idle_then_for_its_head_and_not_while_busy() {
        let served = Served::new(4);
        let place = served.admit().expect("a place");
        let state = &place.state;
        let Some(Wait::Idle(opened)) = state.waiting() else {
            panic!("a new connection waits idle: {:?}", state.waiting());
        };
        // A head's first bytes: it waits for the rest of the head, since them.
        std::thread::sleep(std::time::Duration::from_millis(5));
        state.bytes_arrived();
        assert!(matches!(state.waiting(), Some(Wait::Head(at)) if at > opened));
        // Bytes while a request is in progress (its body) begin no head.
        let request = state.request_began();
        assert_eq!(state.waiting(), None);
        state.bytes_arrived();
        drop(request);
        assert!(matches!(state.waiting(), Some(Wait::Idle(at)) if at > opened));
        // Upgraded: no wait.
        state.upgraded();
        assert_eq!(state.waiting(), None);
    }
}
