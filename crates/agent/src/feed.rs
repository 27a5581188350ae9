//! A ring plus a lazily created broadcast channel: what a follower reads live.

use crate::ring::{Chunk, Ring};
use sandboxd_agent_protocol::ProcessInfo;
use tokio::sync::broadcast;

/// Events a follower receives after the retained tail.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    Chunk(Chunk),
    Exit(Box<ProcessInfo>),
}

/// Capacity of a follower channel; a slower reader gets `Lagged` instead of blocking.
const FOLLOW_CAPACITY: usize = 128;

#[derive(Debug)]
pub(crate) struct Feed {
    pub ring: Ring,
    /// Created on the first follower, so an unwatched process costs no channel.
    tx: Option<broadcast::Sender<Event>>,
}

impl Feed {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            ring: Ring::new(cap),
            tx: None,
        }
    }

    pub(crate) fn push(&mut self, chunk: Chunk) {
        if let Some(tx) = &self.tx {
            if tx.receiver_count() == 0 {
                self.tx = None;
            } else {
                let _ = tx.send(Event::Chunk(chunk.clone()));
            }
        }
        self.ring.push(chunk);
    }

    /// Sends an event to current followers without retaining it.
    pub(crate) fn announce(&mut self, event: Event) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(event);
        }
    }

    /// The retained tail and a receiver for what comes next, taken together so that no
    /// chunk is missed or repeated.
    pub(crate) fn subscribe(
        &mut self,
        tail_bytes: u64,
    ) -> (Vec<Chunk>, broadcast::Receiver<Event>) {
        let tx = self
            .tx
            .get_or_insert_with(|| broadcast::channel(FOLLOW_CAPACITY).0);
        (self.ring.tail(tail_bytes), tx.subscribe())
    }
}
