//! What the terminal stream tests share: a script that writes a known file of base64
//! between two markers on a raw-mode PTY, and a WebSocket reader (slow or as fast as it
//! can) that collects exactly what came between them.

#![allow(dead_code)]

use futures_util::{SinkExt, StreamExt};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

pub const BEGIN: &[u8] = b"--BEGIN--";
pub const DONE: &[u8] = b"--DONE--";

/// Where [`script`] leaves the file it prints.
pub const FILE: &str = "/tmp/t";

/// A line for the shell: raw mode (the tty passes the bytes as they are: no \r\n for
/// \n, no echo), `raw` random bytes as base64 into [`FILE`], then the file between
/// [`BEGIN`] and [`DONE`]. The markers hold '-', which base64 never does, and are put
/// together by the shell so that the echo of the typed line (before `stty` runs) does
/// not hold them.
pub fn script(raw: usize) -> String {
    format!(
        "stty raw -echo; head -c {raw} /dev/urandom | base64 > {FILE}; \
         printf -- '--%s--' BEGIN; cat {FILE}; printf -- '--%s--' DONE\n"
    )
}

/// Lower-case hex sha256.
pub fn sha(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How the reader keeps up.
pub enum Pace<'a> {
    /// A pause of 4 s before the first read (the writer runs ahead), then 5 ms every 16
    /// messages; `rss` (KiB) is sampled at each pause.
    Slow { rss: &'a dyn Fn() -> u64 },
    /// Reads as fast as it can.
    Fast,
}

/// What came between the markers.
pub struct Marked {
    pub got: Vec<u8>,
    /// Peak of the sampled RSS (0 when fast).
    pub peak_kib: u64,
    /// From the read that held [`BEGIN`] to the one that held [`DONE`] (a figure to
    /// print, never to assert on).
    pub elapsed: Duration,
    pub messages: u64,
}

impl Marked {
    pub fn mib_per_s(&self) -> f64 {
        self.got.len() as f64 / self.elapsed.as_secs_f64().max(1e-9) / (1024.0 * 1024.0)
    }
}

/// Sends [`script`]`(raw)` as keystrokes and reads binary messages until [`DONE`] has
/// come after [`BEGIN`]. Fails (rather than hangs) when nothing comes for 60 s. Each
/// message is searched once (with a marker's length of overlap), so the reader's own
/// work stays linear in what it reads.
pub async fn send_and_read<S>(
    ws: &mut tokio_tungstenite::WebSocketStream<S>,
    raw: usize,
    pace: Pace<'_>,
) -> Marked
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    ws.send(Message::Binary(script(raw).into())).await.unwrap();
    let mut peak = 0;
    if let Pace::Slow { rss } = &pace {
        peak = rss();
        tokio::time::sleep(Duration::from_secs(4)).await;
        peak = peak.max(rss());
    }
    let mut seen = Vec::new();
    let mut messages = 0u64;
    let mut begin: Option<(usize, Instant)> = None;
    let mut scanned = 0usize;
    let end = loop {
        let next = tokio::time::timeout(Duration::from_secs(60), ws.next()).await;
        let next = next.expect("nothing more within 60 s: output lost or stalled");
        match next.expect("socket open").expect("message") {
            Message::Binary(d) => seen.extend_from_slice(&d),
            other => panic!("unexpected {other:?}"),
        }
        messages += 1;
        if let Pace::Slow { rss } = &pace {
            if messages.is_multiple_of(16) {
                peak = peak.max(rss());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        // A marker may straddle two messages: search from a marker's length back.
        let from = scanned.saturating_sub(BEGIN.len());
        scanned = seen.len();
        if begin.is_none() {
            if let Some(i) = find(&seen[from..], BEGIN) {
                begin = Some((from + i + BEGIN.len(), Instant::now()));
            } else {
                continue;
            }
        }
        let (start, _) = begin.expect("begin");
        let from = from.max(start);
        if let Some(i) = find(&seen[from..], DONE) {
            break from + i;
        }
    };
    let (start, t0) = begin.expect("begin");
    let elapsed = t0.elapsed();
    seen.truncate(end);
    seen.drain(..start);
    Marked {
        got: seen,
        peak_kib: peak,
        elapsed,
        messages,
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
