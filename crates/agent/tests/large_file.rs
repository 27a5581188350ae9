//! A 100 MiB file goes up and down through the agent without being held in memory.
//! Alone in its test binary so that the process's peak RSS reflects only this transfer.

mod common;

use bytes::Bytes;
use common::*;
use futures_util::StreamExt;

const SIZE: usize = 100 * 1024 * 1024;
const PIECE: usize = 256 * 1024;

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Deterministic content: piece `i` is filled with byte `i % 251`.
fn piece(i: usize) -> Bytes {
    Bytes::from(vec![(i % 251) as u8; PIECE])
}

#[tokio::test]
async fn hundred_mib_round_trip_is_streamed() {
    let agent = start().await;
    let c = &agent.client;
    let path = agent.dir.path().join("big.bin");
    let p = path.to_str().unwrap();
    let before = peak_rss_kib();

    let upload = futures_util::stream::iter((0..SIZE / PIECE).map(|i| Ok(piece(i)))).boxed();
    let written = c.write_file(p, 0o600, upload).await.unwrap();
    assert_eq!(written.bytes_written, SIZE as u64);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), SIZE as u64);

    let (meta, mut download) = c.read_file(p).await.unwrap();
    assert_eq!((meta.size, meta.mode), (SIZE as u64, 0o600));
    let mut offset = 0usize;
    while let Some(chunk) = download.next().await {
        let chunk = chunk.unwrap();
        for (k, b) in chunk.iter().enumerate() {
            let at = offset + k;
            assert_eq!(*b, ((at / PIECE) % 251) as u8, "byte {at}");
        }
        offset += chunk.len();
    }
    assert_eq!(offset, SIZE);

    let growth_mib = (peak_rss_kib().saturating_sub(before)) / 1024;
    eprintln!("peak RSS growth: {growth_mib} MiB");
    assert!(
        growth_mib < 30,
        "peak RSS grew by {growth_mib} MiB moving 100 MiB"
    );
}
