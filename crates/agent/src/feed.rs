//! A ring plus what its readers wait on: a signal on every change, and, for a held
//! process, the offset its holder has read up to, which the drain waits on instead of
//! dropping bytes the holder has not read.

use crate::ring::{Chunk, Ring};
use bytes::Bytes;
use sandboxd_agent_protocol::StreamKind;
use std::time::SystemTime;
use tokio::sync::watch;
use uuid::Uuid;

/// How far the holder of a held feed has read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Nobody holds the feed: the ring drops its oldest bytes when full.
    Off,
    /// Bytes before this offset were read by the holder and may be dropped.
    At(u64),
}

impl Hold {
    /// Whether bytes up to `need` may be dropped.
    pub(crate) fn allows(self, need: u64) -> bool {
        match self {
            Hold::Off => true,
            Hold::At(read) => read >= need,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Feed {
    pub ring: Ring,
    changed: watch::Sender<()>,
    hold: watch::Sender<Hold>,
}

impl Feed {
    /// A feed; `held` ones keep every byte until a holder has read it.
    pub(crate) fn new(cap: usize, held: bool) -> Self {
        let hold = if held { Hold::At(0) } else { Hold::Off };
        Self {
            ring: Ring::new(cap),
            changed: watch::channel(()).0,
            hold: watch::channel(hold).0,
        }
    }

    /// Appends a chunk now (whatever the hold) and wakes readers.
    pub(crate) fn push(
        &mut self,
        stream: StreamKind,
        data: Bytes,
        at: SystemTime,
        process: Option<Uuid>,
    ) -> Chunk {
        let chunk = self.ring.push(stream, data, at, process);
        self.changed.send_replace(());
        chunk
    }

    /// `None` when `len` more bytes fit without dropping any the holder has not read;
    /// otherwise what to wait on and the offset the holder must reach first.
    pub(crate) fn room(&self, len: usize) -> Option<(watch::Receiver<Hold>, u64)> {
        let end = self.ring.end();
        // A chunk larger than the ring fits once the holder has read everything.
        let need = (end + len as u64)
            .saturating_sub(self.ring.cap() as u64)
            .min(end);
        (!self.hold.borrow().allows(need)).then(|| (self.hold.subscribe(), need))
    }

    /// Wakes readers without new output (the process ended).
    pub(crate) fn notify(&self) {
        self.changed.send_replace(());
    }

    /// A receiver that changes on the next push or notification.
    pub(crate) fn subscribe(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }

    /// The holder has read everything before `offset`.
    pub(crate) fn advance_hold(&self, offset: u64) {
        self.hold.send_if_modified(|h| match h {
            Hold::At(read) if *read < offset => {
                *read = offset;
                true
            }
            _ => false,
        });
    }

    /// The holder went away: from now on the ring drops its oldest bytes.
    pub(crate) fn release_hold(&self) {
        self.hold.send_replace(Hold::Off);
    }
}
