//! An untrusted agent cannot make the client hold an answer of any size: a fake agent
//! (a test-local Unix listener speaking the protocol's HTTP) answers oversize or endless
//! bodies, and each call fails with `TooLarge` after reading at most its cap.

use futures_util::StreamExt;
use sandboxd_agent_protocol::limits::{
    exec_answer_bytes, MAX_ANSWER_BYTES, MAX_FRAME_BYTES, SMALL_ANSWER_BYTES,
};
use sandboxd_agent_protocol::{AgentClient, ClientError, ExecRequest};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

/// What the client may have read beyond its cap before it stopped (hyper's read
/// buffer and the socket's buffers), for the fake's count of bytes it got out.
const SLACK: u64 = 1 << 20;
/// The fake stops on its own after this many body bytes (so the old, uncapped client
/// ends too): far past every cap.
const BUDGET: u64 = 128 << 20;

/// A fake agent answering one connection: `head`, then `piece` (if any) over and over
/// until `budget` bytes or the client hangs up, then `tail`. Counts the bytes it wrote.
struct Fake {
    sent: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Fake {
    fn start(
        socket: &Path,
        head: String,
        piece: Vec<u8>,
        tail: &'static [u8],
        budget: u64,
    ) -> Fake {
        let listener = UnixListener::bind(socket).unwrap();
        let sent = Arc::new(AtomicU64::new(0));
        let count = sent.clone();
        let task = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            while !piece.is_empty() && count.load(Ordering::SeqCst) < budget {
                if stream.write_all(&piece).await.is_err() {
                    return; // the client hung up
                }
                count.fetch_add(piece.len() as u64, Ordering::SeqCst);
            }
            let _ = stream.write_all(tail).await;
        });
        Fake { sent, task }
    }

    /// Waits until the fake is done (the client hung up or the budget ran out) and
    /// returns the body bytes it wrote.
    async fn sent(self) -> u64 {
        self.task.await.unwrap();
        self.sent.load(Ordering::SeqCst)
    }
}

/// One HTTP/1.1 chunk of 64 KiB of `byte`.
fn chunk(byte: u8) -> Vec<u8> {
    let mut c = format!("{:x}\r\n", 64 * 1024).into_bytes();
    c.extend(std::iter::repeat_n(byte, 64 * 1024));
    c.extend_from_slice(b"\r\n");
    c
}

const CHUNKED: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                       transfer-encoding: chunked\r\n\r\n";

fn scratch() -> (tempfile::TempDir, std::path::PathBuf, AgentClient) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let client = AgentClient::new(&socket);
    (dir, socket, client)
}

fn assert_too_large(err: &ClientError, limit: u64) {
    assert!(
        matches!(err, ClientError::TooLarge { limit: l } if *l == limit),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_endless_process_list_fails_at_the_answer_cap() {
    let (_dir, socket, client) = scratch();
    // `[` then an endless string: valid JSON so far, never ending.
    let fake = Fake::start(&socket, CHUNKED.into(), chunk(b'a'), b"0\r\n\r\n", BUDGET);
    let err = client.list_processes().await.unwrap_err();
    drop(client);
    let sent = fake.sent().await;
    assert!(
        sent <= MAX_ANSWER_BYTES + SLACK,
        "the client read {sent} bytes"
    );
    assert_too_large(&err, MAX_ANSWER_BYTES);
}

#[tokio::test]
async fn a_declared_oversize_health_answer_is_refused_unread() {
    let (_dir, socket, client) = scratch();
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {BUDGET}\r\n\r\n"
    );
    let fake = Fake::start(&socket, head, vec![b' '; 64 * 1024], b"", BUDGET);
    let err = client.health().await.unwrap_err();
    drop(client);
    let sent = fake.sent().await;
    assert!(
        sent <= SMALL_ANSWER_BYTES + SLACK,
        "the client read {sent} bytes"
    );
    assert_too_large(&err, SMALL_ANSWER_BYTES);
}

#[tokio::test]
async fn an_exec_answer_past_its_own_output_cap_fails() {
    let (_dir, socket, client) = scratch();
    // A well-formed exec answer whose stdout is far more than the 1000 bytes asked.
    let stdout = "QUFB".repeat(256 * 1024);
    let body = format!(
        r#"{{"stdout":"{stdout}","stderr":"","exit_code":0,"signal":null,"timed_out":false,"output_truncated":false,"pid":7}}"#
    );
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let fake = Fake::start(&socket, head, Vec::new(), b"", 0);
    let req = ExecRequest {
        argv: vec!["/bin/true".into()],
        env: None,
        cwd: None,
        timeout_ms: 0,
        max_output_bytes: 1000,
        user: None,
    };
    let err = client.exec(&req).await.unwrap_err();
    drop(client);
    fake.task.abort();
    assert_too_large(&err, exec_answer_bytes(1000));
}

#[tokio::test]
async fn an_endless_output_line_ends_the_stream_at_the_frame_cap() {
    let (_dir, socket, client) = scratch();
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n\
                transfer-encoding: chunked\r\n\r\n";
    // 8 frame caps: enough to show a reader that does not stop (the old one scanned its
    // whole buffer again for each piece, quadratic in the line's length).
    let fake = Fake::start(
        &socket,
        head.into(),
        chunk(b'x'),
        b"0\r\n\r\n",
        8 * MAX_FRAME_BYTES,
    );
    let mut frames = client.logs(true).await.unwrap();
    let first = frames.next().await.expect("an item");
    let rest = frames.next().await;
    drop(frames);
    drop(client);
    let sent = fake.sent().await;
    assert!(
        sent <= MAX_FRAME_BYTES + SLACK,
        "the client read {sent} bytes"
    );
    assert_too_large(&first.unwrap_err(), MAX_FRAME_BYTES);
    assert!(rest.is_none(), "the stream ends after the error");
}
