//! A terminal read as fast as the client can (Runzivo's WebSocket; the web console's
//! terminal goes through the same bridge): tens of MiB of base64 on a raw-mode PTY
//! arrive in order, each byte exactly once (length and sha256 against the ones computed
//! inside the sandbox). The rate is printed, never asserted (the machine is noisy).

mod runzivo_api;
mod terminal_reader;

use runzivo_api::Server;
use terminal_reader::{sha, Pace, FILE};

/// 24 MiB of random bytes: 32 MiB of base64 (and its newlines).
const RAW: usize = 24 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread")]
async fn a_fast_terminal_reader_gets_every_byte_exactly_once() {
    let s = Server::start(30);
    let id = s.create().await;
    let mut ws = s.terminal(&id, "&cols=200&rows=50").await;
    let read = terminal_reader::send_and_read(&mut ws, RAW, Pace::Fast).await;
    eprintln!(
        "{} bytes in {:?} ({:.1} MiB/s, {} messages)",
        read.got.len(),
        read.elapsed,
        read.mib_per_s(),
        read.messages
    );
    let inside = s
        .sh(&id, &format!("wc -c < {FILE}; sha256sum < {FILE}"))
        .await;
    let mut words = inside.split_whitespace();
    let total: usize = words.next().expect("length").parse().expect("number");
    assert_eq!(
        read.got.len(),
        total,
        "bytes lost or doubled in the terminal"
    );
    assert_eq!(sha(&read.got), words.next().expect("sum"));
    let _ = ws.close(None).await;
}
