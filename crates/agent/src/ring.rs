//! A bounded ring of timestamped output chunks, kept exactly as read and numbered by
//! byte offset (stdout and stderr share one count); when full, the oldest whole chunks
//! are dropped, and a reader asking for a dropped offset learns where the ring starts.

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
    /// Offset of its first byte in everything the ring was ever given.
    pub offset: u64,
}

impl Chunk {
    pub(crate) fn frame(&self) -> Frame {
        use base64::Engine as _;
        Frame::Log {
            stream: self.stream,
            data: base64::engine::general_purpose::STANDARD.encode(&self.data),
            at: crate::clock::rfc3339(self.at),
            process: self.process,
            offset: self.offset,
        }
    }

    fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// Chunks in arrival order, at most `cap` payload bytes in all.
#[derive(Debug)]
pub(crate) struct Ring {
    chunks: VecDeque<Chunk>,
    bytes: usize,
    cap: usize,
    /// Offset just past the newest byte ever pushed.
    end: u64,
}

/// Where a read from an offset lands.
#[derive(Debug)]
pub(crate) enum Read {
    /// Chunks from the offset on (the first one may start before it: sliced).
    Chunks(Vec<Chunk>),
    /// The offset was dropped; the ring now starts here.
    Dropped { start: u64 },
}

impl Ring {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            chunks: VecDeque::new(),
            bytes: 0,
            cap,
            end: 0,
        }
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Offset just past the newest byte.
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// Offset of the oldest retained byte (`end` when empty).
    pub(crate) fn start(&self) -> u64 {
        self.chunks.front().map_or(self.end, |c| c.offset)
    }

    /// Appends `data` as the next chunk, dropping the oldest chunks to make room. A
    /// chunk larger than the whole ring keeps only its newest `cap` bytes.
    pub(crate) fn push(
        &mut self,
        stream: StreamKind,
        mut data: Bytes,
        at: SystemTime,
        process: Option<Uuid>,
    ) -> Chunk {
        let mut offset = self.end;
        self.end += data.len() as u64;
        if data.len() > self.cap {
            offset += (data.len() - self.cap) as u64;
            data = data.slice(data.len() - self.cap..);
        }
        while self.bytes + data.len() > self.cap {
            match self.chunks.pop_front() {
                Some(old) => self.bytes -= old.data.len(),
                None => break,
            }
        }
        let chunk = Chunk {
            stream,
            data,
            at,
            process,
            offset,
        };
        self.bytes += chunk.data.len();
        self.chunks.push_back(chunk.clone());
        chunk
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

    /// Offset where [`Ring::tail`] of `limit` starts.
    pub(crate) fn tail_start(&self, limit: u64) -> u64 {
        self.tail(limit).first().map_or(self.end, |c| c.offset)
    }

    /// Chunks from `offset` on, at most about `max_bytes` of them (at least one chunk
    /// when any is there).
    pub(crate) fn read_from(&self, offset: u64, max_bytes: usize) -> Read {
        let start = self.start();
        if offset < start {
            return Read::Dropped { start };
        }
        // Chunks are in offset order: find the first one ending past `offset`.
        let first = self.chunks.partition_point(|c| c.end() <= offset);
        let mut out = Vec::new();
        let mut total = 0usize;
        for c in self.chunks.iter().skip(first) {
            if total >= max_bytes {
                break;
            }
            let mut c = c.clone();
            if c.offset < offset {
                let skip = (offset - c.offset) as usize;
                c.data = c.data.slice(skip..);
                c.offset = offset;
            }
            total += c.data.len();
            out.push(c);
        }
        Read::Chunks(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(r: &mut Ring, s: &'static [u8]) {
        r.push(
            StreamKind::Stdout,
            Bytes::from_static(s),
            SystemTime::now(),
            None,
        );
    }

    fn datas(v: Vec<Chunk>) -> Vec<Bytes> {
        v.into_iter().map(|c| c.data).collect()
    }

    #[test]
    fn drops_oldest_whole_chunks_when_full() {
        let mut r = Ring::new(10);
        for s in [&b"aaaa"[..], b"bbbb", b"cccc"] {
            push(&mut r, s);
        }
        assert_eq!(
            datas(r.tail(0)),
            vec![Bytes::from_static(b"bbbb"), Bytes::from_static(b"cccc")]
        );
        assert_eq!((r.start(), r.end()), (4, 12));
        push(&mut r, b"0123456789AB");
        assert_eq!(datas(r.tail(0)), vec![Bytes::from_static(b"23456789AB")]);
        assert_eq!((r.start(), r.end()), (14, 24));
    }

    #[test]
    fn tail_takes_newest_whole_chunks() {
        let mut r = Ring::new(100);
        for s in [&b"aaa"[..], b"bb", b"c"] {
            push(&mut r, s);
        }
        assert_eq!(
            datas(r.tail(3)),
            vec![Bytes::from_static(b"bb"), Bytes::from_static(b"c")]
        );
        assert_eq!(r.tail_start(3), 3);
        assert_eq!(
            datas(r.tail(5)),
            vec![Bytes::from_static(b"bb"), Bytes::from_static(b"c")]
        );
        assert_eq!(datas(r.tail(6)).len(), 3);
        push(&mut r, b"dddddd");
        assert_eq!(datas(r.tail(2)), vec![Bytes::from_static(b"dddddd")]);
    }

    #[test]
    fn reads_from_an_offset_or_says_it_was_dropped() {
        let mut r = Ring::new(8);
        for s in [&b"aaaa"[..], b"bbbb", b"cccc"] {
            push(&mut r, s);
        }
        assert!(matches!(r.read_from(2, 100), Read::Dropped { start: 4 }));
        let Read::Chunks(c) = r.read_from(6, 100) else {
            panic!("retained")
        };
        assert_eq!(
            datas(c.clone()),
            vec![Bytes::from_static(b"bb"), Bytes::from_static(b"cccc")]
        );
        assert_eq!(c[0].offset, 6);
        let Read::Chunks(c) = r.read_from(12, 100) else {
            panic!("retained")
        };
        assert!(c.is_empty());
        let Read::Chunks(c) = r.read_from(4, 1) else {
            panic!("retained")
        };
        assert_eq!(c.len(), 1);
    }
}
