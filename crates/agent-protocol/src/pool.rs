//! Idle keep-alive connections to agents, reused by short calls (a request body held
//! in memory, an answer read whole): a connect and HTTP/1 handshake less per call.
//! Streams, uploads and downloads keep a connection of their own.
//!
//! Connections are kept per tokio runtime (their I/O task runs on the runtime that made
//! them) and per socket path, at most [`MAX_IDLE_PER_AGENT`] each. A connection whose
//! agent went away is closed by its task and dropped when next seen. A request is
//! retried on another connection only when hyper hands it back unsent, so no call (an
//! exec least of all) ever reaches an agent twice.

use crate::client::ClientError;
use crate::transport::{self, Body};
use bytes::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use tokio::runtime::{Handle, Id};

/// Idle connections kept per agent (concurrent calls beyond it open and close their own).
pub(crate) const MAX_IDLE_PER_AGENT: usize = 4;
/// Above this many agents in the map, returning a connection sweeps closed ones out.
const SWEEP_ABOVE: usize = 64;

type Sender = SendRequest<Body>;
type Key = (Id, PathBuf);

static IDLE: LazyLock<Mutex<HashMap<Key, Vec<Sender>>>> = LazyLock::new(Default::default);

/// Sends `req` to the agent at `socket` and reads the whole answer (at most `limit`
/// bytes, else `TooLarge`), on an idle connection when a live one is kept, else on a
/// new one kept afterwards.
pub(crate) async fn exchange(
    socket: &Path,
    req: Request<Body>,
    limit: u64,
) -> Result<(StatusCode, Bytes), ClientError> {
    let (resp, connection) = stream(socket, req).await?;
    let status = resp.status();
    // Not kept when the body failed or passed `limit`: its rest is unread.
    let body = transport::collect(resp, limit).await?;
    connection.keep();
    Ok((status, body))
}

/// A connection busy with a streamed answer, kept again once the answer has been read
/// to its end ([`Streaming::keep`]); dropped (closed) with it otherwise.
pub(crate) struct Streaming {
    key: Option<Key>,
    sender: Sender,
}

impl Streaming {
    /// Keeps the connection for the next call: its answer was read whole.
    pub(crate) fn keep(self) {
        if let Some(key) = self.key {
            put_back(key, self.sender);
        }
    }
}

/// Sends `req` to the agent at `socket` on an idle connection when a live one is kept
/// (a new one otherwise) and returns the answer unread, with its connection: a stream
/// on a kept connection pays no connect and handshake.
pub(crate) async fn stream(
    socket: &Path,
    mut req: Request<Body>,
) -> Result<(hyper::Response<hyper::body::Incoming>, Streaming), ClientError> {
    let key = Handle::try_current()
        .ok()
        .map(|h| (h.id(), socket.to_owned()));
    while let Some(mut sender) = key.as_ref().and_then(take) {
        if sender.ready().await.is_err() {
            continue;
        }
        match sender.try_send_request(req).await {
            Ok(resp) => return Ok((resp, Streaming { key, sender })),
            Err(mut e) => match e.take_message() {
                Some(unsent) => req = unsent,
                None => return Err(transport::request_failed(e.error())),
            },
        }
    }
    let mut sender = transport::open(socket).await?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| transport::request_failed(&e))?;
    Ok((resp, Streaming { key, sender }))
}

/// Opens a connection to the agent at `socket` and keeps it idle for the next short
/// call, unless one is kept already (a new sandbox's first call then pays no connect
/// and handshake). Nothing is sent; a failure is the next call's to meet.
pub(crate) async fn preconnect(socket: &Path) {
    let Some(key) = Handle::try_current()
        .ok()
        .map(|h| (h.id(), socket.to_owned()))
    else {
        return;
    };
    let kept = IDLE
        .lock()
        .map(|idle| {
            idle.get(&key)
                .is_some_and(|s| s.iter().any(|s| !s.is_closed()))
        })
        .unwrap_or(true);
    if kept {
        return;
    }
    if let Ok(sender) = transport::open(socket).await {
        put_back(key, sender);
    }
}

fn take(key: &Key) -> Option<Sender> {
    let mut idle = IDLE.lock().ok()?;
    let senders = idle.get_mut(key)?;
    let sender = senders.pop();
    if senders.is_empty() {
        idle.remove(key);
    }
    sender
}

fn put_back(key: Key, sender: Sender) {
    let Ok(mut idle) = IDLE.lock() else { return };
    if idle.len() > SWEEP_ABOVE {
        idle.retain(|_, senders| {
            senders.retain(|s| !s.is_closed());
            !senders.is_empty()
        });
    }
    let senders = idle.entry(key).or_default();
    senders.retain(|s| !s.is_closed());
    if senders.len() < MAX_IDLE_PER_AGENT && !sender.is_closed() {
        senders.push(sender);
    }
}

/// How many idle connections are kept for `socket` on the current runtime.
#[cfg(test)]
pub(crate) fn idle_count(socket: &Path) -> usize {
    let key = (Handle::current().id(), socket.to_owned());
    IDLE.lock()
        .map(|idle| idle.get(&key).map_or(0, Vec::len))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AgentClient;
    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A real HTTP/1.1 server on a Unix socket answering `/v1/health`, counting the
    /// connections it accepts and the requests it reads. With `hang_up`, it reads each
    /// request and closes the connection without answering.
    struct Peer {
        connections: Arc<AtomicUsize>,
        requests: Arc<AtomicUsize>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Peer {
        fn start(socket: &Path, hang_up: bool) -> Peer {
            let _ = std::fs::remove_file(socket);
            let listener = tokio::net::UnixListener::bind(socket).unwrap();
            let (connections, requests) =
                (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let (c, r) = (connections.clone(), requests.clone());
            let task = tokio::spawn(async move {
                let mut conns = tokio::task::JoinSet::new();
                while let Ok((stream, _)) = listener.accept().await {
                    c.fetch_add(1, Ordering::SeqCst);
                    let r = r.clone();
                    conns.spawn(async move {
                        if hang_up {
                            let mut buf = [0u8; 1024];
                            let n = tokio::io::AsyncReadExt::read(&mut { stream }, &mut buf).await;
                            if n.is_ok_and(|n| n > 0) {
                                r.fetch_add(1, Ordering::SeqCst);
                            }
                            return;
                        }
                        let service = service_fn(move |_req| {
                            r.fetch_add(1, Ordering::SeqCst);
                            let body = r#"{"protocol":1,"pid":1}"#;
                            async move {
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                    Bytes::from(body),
                                )))
                            }
                        });
                        let conn = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service);
                        let _ = conn.await;
                    });
                }
            });
            Peer {
                connections,
                requests,
                task,
            }
        }

        fn counts(&self) -> (usize, usize) {
            (
                self.connections.load(Ordering::SeqCst),
                self.requests.load(Ordering::SeqCst),
            )
        }

        /// Stops accepting and closes every connection, as a dying agent does.
        async fn stop(self) {
            self.task.abort();
            let _ = self.task.await;
        }
    }

    /// A temporary directory, a socket path in it and a client for that path.
    fn scratch() -> (tempfile::TempDir, PathBuf, AgentClient) {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let client = AgentClient::new(&socket);
        (dir, socket, client)
    }

    #[tokio::test]
    async fn short_calls_reuse_one_kept_connection() {
        let (_dir, socket, client) = scratch();
        let peer = Peer::start(&socket, false);
        for _ in 0..3 {
            assert_eq!(client.health().await.unwrap().protocol, 1);
        }
        assert_eq!(peer.counts(), (1, 3));
        assert_eq!(idle_count(&socket), 1);
        peer.stop().await;
    }

    #[tokio::test]
    async fn a_preconnected_connection_serves_the_first_call() {
        let (_dir, socket, client) = scratch();
        let peer = Peer::start(&socket, false);
        client.preconnect().await;
        client.preconnect().await; // one is kept already: no second
        assert_eq!(idle_count(&socket), 1);
        client.health().await.unwrap();
        assert_eq!(
            peer.counts(),
            (1, 1),
            "the call went on the kept connection"
        );
        assert_eq!(idle_count(&socket), 1);
        peer.stop().await;
    }

    #[tokio::test]
    async fn a_connection_whose_agent_went_away_is_replaced() {
        let (_dir, socket, client) = scratch();
        let first = Peer::start(&socket, false);
        client.health().await.unwrap();
        assert_eq!(idle_count(&socket), 1);
        first.stop().await;
        // A new agent on the same path: the kept connection is dead, the call is not.
        let second = Peer::start(&socket, false);
        assert_eq!(client.health().await.unwrap().protocol, 1);
        assert_eq!(second.counts(), (1, 1));
        assert_eq!(idle_count(&socket), 1);
        second.stop().await;
    }

    #[tokio::test]
    async fn a_request_that_reached_the_agent_is_never_sent_again() {
        let (_dir, socket, client) = scratch();
        let peer = Peer::start(&socket, true);
        let err = client.health().await.unwrap_err();
        assert!(matches!(err, ClientError::Protocol(_)), "{err}");
        assert_eq!(peer.counts(), (1, 1));
        assert_eq!(idle_count(&socket), 0);
        peer.stop().await;
    }
}
