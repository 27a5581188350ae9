//! The API's accept loop: a bounded number of connections, deadlines for a connection
//! waiting for a request (`waiting`), and a graceful drain. A client that opens
//! connections and sends nothing holds each for at most the idle timeout, one with half
//! a request header for at most the header-read timeout, and either only while no
//! newcomer needs its place (`served`): at the cap a new connection takes the place of
//! the one idle longest, and only when every connection has a request in progress is
//! it answered 503 with `Retry-After` in the dialect of the path it asked for, and
//! closed.
//! A request body must keep the server's pace (`BodyPace`): one that stalls or dribbles
//! fails its request (408 in the dialect's shape) and ends its connection.

use crate::accept_errors::AcceptErrors;
use crate::config::ConnectionLimits;
use crate::overload::overloaded;
use crate::served::{guarded, ConnState, Served};
use crate::trim::ConnectionCount;
use crate::waiting::{WaitLimits, Waiting};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use sandboxd_dialect_common::{paced, BodyPace};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

/// Connections past the cap that may be waiting for their 503 at once; more are closed
/// unanswered.
const OVERLOAD_ANSWERS: usize = 256;
/// How long a connection past the cap has to send its request line.
const OVERLOAD_DEADLINE: Duration = Duration::from_secs(2);
/// How long a connection whose place was taken may take to write what it still holds
/// of its last response.
const EVICTED_FLUSH: Duration = Duration::from_secs(2);
/// Largest request head or buffered body chunk a connection holds (hyper's default is
/// about 400 KiB; ours keeps thousands of connections within a few hundred MiB).
const MAX_BUF: usize = 64 * 1024;

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting and
/// waits for the connections in progress to finish their current request.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let served = Served::new(limits.max);
    let overload = Arc::new(Semaphore::new(OVERLOAD_ANSWERS));
    let (stop_tx, stop_rx) = watch::channel(false);
    let count = Arc::new(ConnectionCount::default());
    tokio::spawn(count.clone().trim_after_crowds());
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // Our own wait deadlines instead (`Waiting`): hyper's would close a kept-alive
        // connection at the header-read timeout after its last answer.
        .header_read_timeout(None)
        .max_buf_size(MAX_BUF);
    let wait = WaitLimits {
        idle: limits.idle_timeout,
        head: limits.header_read_timeout,
    };
    let mut shutdown = std::pin::pin!(shutdown);
    let mut errors = AcceptErrors::default();
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    errors.accepted();
                    tcp
                }
                Err(e) => {
                    accept_failed(e, &mut errors).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
        match served.admit() {
            Some(place) => {
                let conn = Connection {
                    builder: builder.clone(),
                    app: app.clone(),
                    pace: limits.body_pace,
                    wait,
                    stop: stop_rx.clone(),
                    state: place.state.clone(),
                };
                let count = count.clone();
                count.opened();
                tokio::spawn(async move {
                    conn.run(tcp).await;
                    count.closed();
                    drop(place);
                });
            }
            None => match overload.clone().try_acquire_owned() {
                Ok(permit) => {
                    tokio::spawn(async move {
                        answer_overloaded(tcp).await;
                        drop(permit);
                    });
                }
                Err(_) => drop(tcp),
            },
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds its place until it ends (or gives it up, idle).
    served.all_ended().await;
}

/// One accepted connection within the cap.
struct Connection {
    builder: http1::Builder,
    app: Router,
    pace: BodyPace,
    wait: WaitLimits,
    stop: watch::Receiver<bool>,
    /// Its requests in progress, and whether its place was taken.
    state: Arc<ConnState>,
}

impl Connection {
    async fn run(mut self, tcp: TcpStream) {
        let pace = self.pace;
        let (state, router) = (self.state.clone(), self.app.clone());
        // A request is in progress from its head until its response's body is sent (or
        // dropped): the connection is then not idle, and keeps its place.
        let app = tower::service_fn(move |req: Request<Incoming>| {
            let guard = state.request_began();
            let req = req.map(|body| paced(Body::new(body), pace));
            let router = router.clone();
            async move {
                let response = router.oneshot(req).await?;
                if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                    guard.upgraded();
                }
                Ok::<_, std::convert::Infallible>(response.map(|body| guarded(body, guard)))
            }
        });
        let service = TowerToHyperService::new(app);
        let conn = self
            .builder
            .serve_connection(
                TokioIo::new(Waiting::new(tcp, self.state.clone(), self.wait)),
                service,
            )
            .with_upgrades();
        let mut conn = std::pin::pin!(conn);
        let evicted = tokio::select! {
            result = conn.as_mut() => return log_end(result),
            () = self.state.evicted() => true,
            _ = self.stop.wait_for(|stop| *stop) => false,
        };
        conn.as_mut().graceful_shutdown();
        if evicted {
            // Its place was taken while it waited for a request: closed, once what it
            // still has of its last response is written (bounded: the place is gone).
            let _ = tokio::time::timeout(EVICTED_FLUSH, conn.as_mut()).await;
            return;
        }
        log_end(conn.await);
    }
}

fn log_end(result: Result<(), hyper::Error>) {
    if let Err(e) = result {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Reads a connection's request head (briefly) to answer 503 in its dialect, then closes.
async fn answer_overloaded(tcp: TcpStream) {
    let service = hyper::service::service_fn(|req: hyper::Request<hyper::body::Incoming>| {
        let response = overloaded(req.uri().path());
        async move { Ok::<_, std::convert::Infallible>(response) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(OVERLOAD_DEADLINE)
        .keep_alive(false)
        .max_buf_size(8 * 1024)
        .serve_connection(TokioIo::new(tcp), service);
    let _ = tokio::time::timeout(OVERLOAD_DEADLINE * 2, conn).await;
}

/// Accept errors on one connection are the client's; running out of descriptors is a
/// shortage to wait out (the connections in progress will free some), logged at a
/// bounded rate (`errors`) while the loop retries every 50 ms.
async fn accept_failed(e: std::io::Error, errors: &mut AcceptErrors) {
    use std::io::ErrorKind::*;
    if matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted) {
        return;
    }
    errors.failed(&e);
    tokio::time::sleep(Duration::from_millis(50)).await;
}
