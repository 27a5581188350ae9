//! Managed processes: their lifecycle state and output rings, of which only the newest
//! `max_rings` are retained (older ones are evicted; their metadata stays until the
//! process is among more than `KEPT_ENDED_PROCESSES` ended ones), and a bounded prefix
//! of their command lines: what a process list holds is bounded.

use crate::error::error;
use crate::feed::{Feed, Hold};
use crate::kept_argv::kept_argv;
use crate::reaper::Exit;
use bytes::Bytes;
use sandboxd_agent_protocol::{AgentError, AgentErrorCode, ProcessInfo, ProcessState, StreamKind};
use std::collections::{BTreeMap, VecDeque};
use std::time::SystemTime;
use tokio::sync::watch;
use uuid::Uuid;

struct Entry {
    /// A bounded prefix of the command line (see `kept_argv`).
    argv: Vec<String>,
    argv_truncated: bool,
    pid: u32,
    started_at: SystemTime,
    ended_at: Option<SystemTime>,
    state: ProcessState,
    exit_code: Option<i32>,
    signal: Option<i32>,
    /// The exit status was collected: the PID may be reused, signals become no-ops.
    reaped: bool,
    /// `None` once evicted.
    feed: Option<Feed>,
    done: watch::Sender<bool>,
}

impl Entry {
    fn info(&self, id: Uuid) -> ProcessInfo {
        ProcessInfo {
            id,
            argv: self.argv.clone(),
            pid: self.pid,
            state: self.state,
            started_at: crate::clock::rfc3339(self.started_at),
            ended_at: self.ended_at.map(crate::clock::rfc3339),
            exit_code: self.exit_code,
            signal: self.signal,
            output_retained: self.feed.is_some(),
            argv_truncated: self.argv_truncated,
        }
    }
}

pub(crate) struct Registry {
    entries: BTreeMap<Uuid, Entry>,
    retained: VecDeque<Uuid>,
    /// Ended processes, oldest first; past `max_ended` the oldest are forgotten.
    ended: VecDeque<Uuid>,
    ring_bytes: usize,
    max_rings: usize,
    max_ended: usize,
}

fn not_found(id: Uuid) -> AgentError {
    error(AgentErrorCode::ProcessNotFound, format!("no process {id}"))
}

pub(crate) fn not_retained(id: Uuid) -> AgentError {
    error(
        AgentErrorCode::OutputNotRetained,
        format!("output of {id} was evicted"),
    )
}

impl Registry {
    /// A registry that forgets ended processes past `max_ended` (at least one is kept).
    pub(crate) fn new(ring_bytes: usize, max_rings: usize, max_ended: usize) -> Self {
        Self {
            entries: BTreeMap::new(),
            retained: VecDeque::new(),
            ended: VecDeque::new(),
            ring_bytes,
            max_rings,
            max_ended: max_ended.max(1),
        }
    }

    pub(crate) fn contains(&self, id: Uuid) -> bool {
        self.entries.contains_key(&id)
    }

    /// Records a started process, evicting the oldest retained ring when over the limit.
    /// A `held` process's ring keeps every byte until its holder has read it.
    pub(crate) fn insert(
        &mut self,
        id: Uuid,
        argv: Vec<String>,
        pid: u32,
        held: bool,
    ) -> ProcessInfo {
        while self.retained.len() >= self.max_rings.max(1) {
            let Some(old) = self.retained.pop_front() else {
                break;
            };
            if let Some(e) = self.entries.get_mut(&old) {
                e.feed = None;
            }
        }
        self.retained.push_back(id);
        let (argv, argv_truncated) = kept_argv(&argv);
        let entry = Entry {
            argv,
            argv_truncated,
            pid,
            started_at: SystemTime::now(),
            ended_at: None,
            state: ProcessState::Running,
            exit_code: None,
            signal: None,
            reaped: false,
            feed: Some(Feed::new(self.ring_bytes, held)),
            done: watch::channel(false).0,
        };
        let info = entry.info(id);
        self.entries.insert(id, entry);
        info
    }

    pub(crate) fn get(&self, id: Uuid) -> Result<ProcessInfo, AgentError> {
        self.entries
            .get(&id)
            .map(|e| e.info(id))
            .ok_or_else(|| not_found(id))
    }

    /// At most `limit` processes sorted by id, those after `after` when given.
    pub(crate) fn list_page(&self, after: Option<Uuid>, limit: usize) -> Vec<ProcessInfo> {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = after.map_or(Unbounded, Excluded);
        self.entries
            .range((from, Unbounded))
            .take(limit)
            .map(|(id, e)| e.info(*id))
            .collect()
    }

    /// Appends output to the process's ring, unless that would drop bytes its holder
    /// has not read: then `Some` of what to wait on and the offset the holder must reach.
    pub(crate) fn push(
        &mut self,
        id: Uuid,
        stream: StreamKind,
        data: &Bytes,
        at: SystemTime,
    ) -> Option<(watch::Receiver<Hold>, u64)> {
        let feed = self.entries.get_mut(&id).and_then(|e| e.feed.as_mut())?;
        if let Some(wait) = feed.room(data.len()) {
            return Some(wait);
        }
        feed.push(stream, data.clone(), at, None);
        None
    }

    /// The process's feed (`None` once evicted) and its final info once it ended.
    pub(crate) fn feed(
        &mut self,
        id: Uuid,
    ) -> Result<(Option<&mut Feed>, Option<ProcessInfo>), AgentError> {
        let e = self.entries.get_mut(&id).ok_or_else(|| not_found(id))?;
        let ended = e.state.is_terminal().then(|| e.info(id));
        Ok((e.feed.as_mut(), ended))
    }

    pub(crate) fn mark_reaped(&mut self, id: Uuid) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.reaped = true;
        }
    }

    /// Makes the process terminal, tells followers and waiters.
    pub(crate) fn finish(&mut self, id: Uuid, exit: Option<Exit>) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        let newly_ended = !e.state.is_terminal();
        e.reaped = true;
        e.ended_at = Some(SystemTime::now());
        match exit {
            Some(Exit::Code(c)) => (e.state, e.exit_code) = (ProcessState::Exited, Some(c)),
            Some(Exit::Signal(s)) => (e.state, e.signal) = (ProcessState::Killed, Some(s)),
            None => e.state = ProcessState::Lost,
        }
        if let Some(feed) = e.feed.as_ref() {
            feed.notify();
        }
        e.done.send_replace(true);
        if newly_ended {
            self.ended.push_back(id);
        }
        while self.ended.len() > self.max_ended {
            let Some(old) = self.ended.pop_front() else {
                break;
            };
            // Its followers and waiters were told it ended; later lookups find no process.
            self.entries.remove(&old);
            self.retained.retain(|r| *r != old);
        }
    }

    /// The PID to signal, or `None` when the process is already terminal (a no-op).
    pub(crate) fn signal_target(&self, id: Uuid) -> Result<Option<u32>, AgentError> {
        let e = self.entries.get(&id).ok_or_else(|| not_found(id))?;
        Ok((!e.reaped && !e.state.is_terminal()).then_some(e.pid))
    }

    pub(crate) fn watch_done(&self, id: Uuid) -> Result<watch::Receiver<bool>, AgentError> {
        self.entries
            .get(&id)
            .map(|e| e.done.subscribe())
            .ok_or_else(|| not_found(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_oldest_rings_and_keeps_metadata() {
        let mut r = Registry::new(1024, 2, 8);
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
        for (i, id) in ids.iter().enumerate() {
            r.insert(*id, vec!["/bin/true".into()], 100 + i as u32, false);
        }
        assert!(r.feed(ids[0]).unwrap().0.is_none());
        assert!(!r.get(ids[0]).unwrap().output_retained);
        assert!(r.feed(ids[2]).unwrap().0.is_some());
        r.finish(ids[1], Some(Exit::Signal(9)));
        let info = r.get(ids[1]).unwrap();
        assert_eq!((info.state, info.signal), (ProcessState::Killed, Some(9)));
        assert_eq!(r.signal_target(ids[1]).unwrap(), None);
        assert_eq!(r.signal_target(ids[2]).unwrap(), Some(102));
    }
}

#[cfg(test)]
mod bound_tests {
    use super::*;
    use sandboxd_agent_protocol::limits::{KEPT_ARGS, KEPT_ARGV_BYTES};

    #[test]
    fn ended_processes_past_the_cap_are_forgotten_oldest_first() {
        let mut r = Registry::new(1024, 4, 3);
        let running = Uuid::new_v4();
        r.insert(running, vec!["/bin/sleep".into()], 1, false);
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
        for (i, id) in ids.iter().enumerate() {
            r.insert(*id, vec!["/bin/true".into()], 10 + i as u32, false);
            r.finish(*id, Some(Exit::Code(0)));
        }
        assert_eq!(
            r.list_page(None, usize::MAX).len(),
            4,
            "the running one and the newest 3 ended"
        );
        for old in &ids[..2] {
            assert_eq!(
                r.get(*old).unwrap_err().code,
                AgentErrorCode::ProcessNotFound
            );
        }
        assert!(r.contains(running) && r.contains(ids[4]));
        assert!(r.retained.len() <= 4 && !r.retained.contains(&ids[0]));
    }

    #[test]
    fn a_huge_command_line_is_kept_as_a_bounded_prefix() {
        let mut r = Registry::new(1024, 4, 8);
        let id = Uuid::new_v4();
        let argv = vec!["a".repeat(120 * 1024); KEPT_ARGS * 2];
        let info = r.insert(id, argv, 1, false);
        let bytes: usize = info.argv.iter().map(String::len).sum();
        assert!(bytes <= KEPT_ARGV_BYTES && info.argv_truncated);
        assert_eq!(r.get(id).unwrap().argv, info.argv);
    }
}
