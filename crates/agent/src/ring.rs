//! A bounded ring of timestamped output chunks, kept exactly as read; when full, the
//! oldest whole chunks are dropped.

use bytes::Bytes;
use sandboxd_agent_protocol::{Frame, StreamKind};
use std::collections::VecDeque;
use std::time::SystemTime;
use uuid::Uuid;

/// One read from a process's stdout or stderr.
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    pub stream: StreamKind,
    pub data: Bytes,
    pub at: SystemTime,
    /// Set in the sandbox-level log, where chunks of all processes meet.
    pub process: Option<Uuid>,
}

impl Chunk {
    pub(crate) fn frame(&self) -> Frame {
        use base64::Engine as _;
        Frame::Log {
            stream: self.stream,
            data: base64::engine::general_purpose::STANDARD.encode(&self.data),
            at: crate::clock::rfc3339(self.at),
            process: self.process,
        }
    }
}

/// Chunks in arrival order, at most `cap` payload bytes in all.
#[derive(Debug)]
pub(crate) struct Ring {
    chunks: VecDeque<Chunk>,
    bytes: usize,
    cap: usize,
}

impl Ring {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            chunks: VecDeque::new(),
            bytes: 0,
            cap,
        }
    }

    /// Appends `chunk`, dropping the oldest chunks to make room. A chunk larger than the
    /// whole ring keeps only its newest `cap` bytes.
    pub(crate) fn push(&mut self, mut chunk: Chunk) {
        if chunk.data.len() > self.cap {
            chunk.data = chunk.data.slice(chunk.data.len() - self.cap..);
        }
        while self.bytes + chunk.data.len() > self.cap {
            match self.chunks.pop_front() {
                Some(old) => self.bytes -= old.data.len(),
                None => break,
            }
        }
        self.bytes += chunk.data.len();
        self.chunks.push_back(chunk);
    }

    /// The newest whole chunks whose sizes add up to at most `limit` bytes (0 = all).
    /// Chunks are never split: if the newest chunk alone is larger than `limit`, it is
    /// returned alone, so a tail request always shows the latest output.
    pub(crate) fn tail(&self, limit: u64) -> Vec<Chunk> {
        if limit == 0 {
            return self.chunks.iter().cloned().collect();
        }
        let mut total = 0u64;
        let mut start = self.chunks.len();
        for (i, c) in self.chunks.iter().enumerate().rev() {
            let len = c.data.len() as u64;
            if total + len > limit && start != self.chunks.len() {
                break;
            }
            total += len;
            start = i;
            if total >= limit {
                break;
            }
        }
        self.chunks.iter().skip(start).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(s: &'static [u8]) -> Chunk {
        Chunk {
            stream: StreamKind::Stdout,
            data: Bytes::from_static(s),
            at: SystemTime::now(),
            process: None,
        }
    }

    fn datas(v: Vec<Chunk>) -> Vec<Bytes> {
        v.into_iter().map(|c| c.data).collect()
    }

    #[test]
    fn drops_oldest_whole_chunks_when_full() {
        let mut r = Ring::new(10);
        for s in [&b"aaaa"[..], b"bbbb", b"cccc"] {
            r.push(chunk(s));
        }
        assert_eq!(
            datas(r.tail(0)),
            vec![Bytes::from_static(b"bbbb"), Bytes::from_static(b"cccc")]
        );
        r.push(chunk(b"0123456789AB"));
        assert_eq!(datas(r.tail(0)), vec![Bytes::from_static(b"23456789AB")]);
    }

    #[test]
    fn tail_takes_newest_whole_chunks() {
        let mut r = Ring::new(100);
        for s in [&b"aaa"[..], b"bb", b"c"] {
            r.push(chunk(s));
        }
        assert_eq!(
            datas(r.tail(3)),
            vec![Bytes::from_static(b"bb"), Bytes::from_static(b"c")]
        );
        assert_eq!(
            datas(r.tail(5)),
            vec![Bytes::from_static(b"bb"), Bytes::from_static(b"c")]
        );
        assert_eq!(datas(r.tail(6)).len(), 3);
        r.push(chunk(b"dddddd"));
        assert_eq!(datas(r.tail(2)), vec![Bytes::from_static(b"dddddd")]);
    }
}
