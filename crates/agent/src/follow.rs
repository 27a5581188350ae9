//! Readers of a feed by byte offset: from the retained tail (or a given offset) on,
//! then, when following, new chunks as they come. A reader whose next offset was
//! dropped from the ring gets a `Gap` frame naming the lost range before it goes on;
//! a holder of a held process advances the hold as it reads, which lets the drain go on.

use crate::feed::Feed;
use crate::registry::not_retained;
use crate::shared::Shared;
use bytes::{Bytes, BytesMut};
use futures_util::stream::{self, Stream};
use sandboxd_agent_protocol::{AgentError, Frame, ProcessInfo};
use std::io;
use std::sync::Arc;
use tokio::sync::watch;
use uuid::Uuid;

/// Payload bytes read from the ring per body chunk.
const BATCH: usize = 256 * 1024;

/// Which feed a reader reads.
#[derive(Clone, Copy)]
pub(crate) enum Source {
    Process(Uuid),
    Log,
}

impl Source {
    /// The process's id (nil for the log, which is never evicted).
    fn id(self) -> Uuid {
        match self {
            Source::Process(id) => id,
            Source::Log => Uuid::nil(),
        }
    }
}

/// Where a reader starts and how it goes on.
pub(crate) struct Start {
    /// Start at the newest whole chunks within this many bytes (0 = all retained).
    pub tail_bytes: u64,
    /// Start at this offset instead (a dropped one yields a `Gap` first).
    pub from: Option<u64>,
    pub follow: bool,
    /// Advance the feed's hold as this reader reads (a held process's one reader).
    pub hold: bool,
}

pub(crate) struct Reader {
    shared: Arc<Shared>,
    source: Source,
    offset: u64,
    /// Without follow: stop here (the ring's end when the reader opened).
    until: Option<u64>,
    hold: bool,
    done: bool,
}

enum Step {
    Lines(Bytes),
    /// The last lines (or none).
    End(Option<Bytes>),
    Wait(watch::Receiver<()>),
}

fn line(frame: &Frame) -> Bytes {
    let mut v = serde_json::to_vec(frame).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

impl Reader {
    /// Opens a reader; a missing process or an evicted ring is an error now.
    pub(crate) fn open(
        shared: Arc<Shared>,
        source: Source,
        start: Start,
    ) -> Result<Reader, AgentError> {
        let (offset, end) = with_feed(&shared, source, |feed, _| {
            let feed = feed.ok_or_else(|| not_retained(source.id()))?;
            let offset = start
                .from
                .unwrap_or_else(|| feed.ring.tail_start(start.tail_bytes));
            Ok::<_, AgentError>((offset, feed.ring.end()))
        })??;
        Ok(Reader {
            shared,
            source,
            offset,
            until: (!start.follow).then_some(end),
            hold: start.hold,
            done: false,
        })
    }

    /// The NDJSON body: frames until the process's `Exit` (or, without follow, the
    /// ring's end when opened); an evicted ring ends with an `Error` frame.
    pub(crate) fn into_stream(self) -> impl Stream<Item = io::Result<Bytes>> + Send {
        stream::unfold(self, |mut r| async move {
            if r.done {
                return None;
            }
            loop {
                match r.step() {
                    Step::Lines(b) => return Some((Ok(b), r)),
                    Step::End(Some(b)) => {
                        r.done = true;
                        return Some((Ok(b), r));
                    }
                    Step::End(None) => return None,
                    // An error means the ring was evicted: the next step says so.
                    Step::Wait(mut rx) => drop(rx.changed().await),
                }
            }
        })
    }

    fn step(&mut self) -> Step {
        let (offset, until, hold, source) = (self.offset, self.until, self.hold, self.source);
        let step = with_feed(&self.shared, source, |feed, ended| {
            let Some(feed) = feed else {
                let e = not_retained(source.id());
                let code = e.code_str();
                return (
                    offset,
                    Step::End(Some(line(&Frame::Error {
                        code,
                        message: e.message,
                    }))),
                );
            };
            if hold {
                feed.advance_hold(offset);
            }
            read(feed, offset, until, ended)
        });
        match step {
            Ok((offset, step)) => {
                self.offset = offset;
                step
            }
            Err(e) => Step::End(Some(line(&Frame::Error {
                code: e.code_str(),
                message: e.message,
            }))),
        }
    }
}

/// One step of a reader at `offset`: its next offset and what to send or wait on.
fn read(feed: &Feed, offset: u64, until: Option<u64>, ended: Option<ProcessInfo>) -> (u64, Step) {
    let limit = until.map_or(BATCH, |u| BATCH.min(u.saturating_sub(offset) as usize));
    let chunks = match feed.ring.read_from(offset, limit) {
        crate::ring::Read::Dropped { start } => {
            let gap = Frame::Gap {
                from: offset,
                to: start,
            };
            return (start, Step::Lines(line(&gap)));
        }
        crate::ring::Read::Chunks(c) => c,
    };
    let reached_until = until.is_some_and(|u| offset >= u);
    if chunks.is_empty() || reached_until {
        let at_end = offset >= feed.ring.end();
        return match (ended, until) {
            (Some(info), _) if at_end => (offset, Step::End(Some(line(&Frame::Exit { info })))),
            (_, Some(_)) => (offset, Step::End(None)),
            (_, None) => (offset, Step::Wait(feed.subscribe())),
        };
    }
    let mut buf = BytesMut::new();
    let mut next = offset;
    for c in chunks {
        // Without follow, stop at the end seen when the reader opened.
        if until.is_some_and(|u| c.offset >= u) {
            break;
        }
        next = c.offset + c.data.len() as u64;
        buf.extend_from_slice(&line(&c.frame()));
    }
    (next, Step::Lines(buf.freeze()))
}

/// Runs `f` on the reader's feed under its lock, with the process's final info once it
/// ended (the log never ends).
fn with_feed<R>(
    shared: &Shared,
    source: Source,
    f: impl FnOnce(Option<&mut Feed>, Option<ProcessInfo>) -> R,
) -> Result<R, AgentError> {
    match source {
        Source::Process(id) => {
            let mut registry = shared.registry();
            let (feed, ended) = registry.feed(id)?;
            Ok(f(feed, ended))
        }
        Source::Log => {
            let mut log = shared.log();
            Ok(f(Some(&mut *log), None))
        }
    }
}

impl Drop for Reader {
    /// A holder that goes away releases the hold: the process is no longer held back.
    fn drop(&mut self) {
        if self.hold {
            let _ = with_feed(&self.shared, self.source, |feed, _| {
                if let Some(feed) = feed {
                    feed.release_hold();
                }
            });
        }
    }
}
