//! When each sandbox was last used, and whether an operation is using it now: the
//! sweep moves the sandbox idle the longest first, and never one in use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use uuid::Uuid;

#[derive(Debug, Clone, Copy)]
struct Use {
    last: Instant,
    busy: usize,
}

/// Last use and operations under way, per sandbox (in memory: after a restart every
/// sandbox counts as used when the engine opened).
#[derive(Debug, Clone)]
pub(crate) struct Activity {
    map: Arc<Mutex<HashMap<Uuid, Use>>>,
    opened: Instant,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            map: Default::default(),
            opened: Instant::now(),
        }
    }
}

/// An operation under way in a sandbox; its end counts as the sandbox's last use.
#[derive(Debug)]
pub(crate) struct Busy {
    map: Arc<Mutex<HashMap<Uuid, Use>>>,
    id: Uuid,
}

impl Activity {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<Uuid, Use>) -> T) -> T {
        f(&mut self.map.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Marks sandbox `id` as used now.
    pub(crate) fn touch(&self, id: Uuid) {
        let now = Instant::now();
        self.with(|m| {
            m.entry(id).or_insert(Use { last: now, busy: 0 }).last = now;
        });
    }

    /// Marks an operation under way in `id` until the guard is dropped.
    pub(crate) fn begin(&self, id: Uuid) -> Busy {
        let now = Instant::now();
        self.with(|m| {
            let u = m.entry(id).or_insert(Use { last: now, busy: 0 });
            u.busy += 1;
            u.last = now;
        });
        Busy {
            map: self.map.clone(),
            id,
        }
    }

    /// Since when `id` is idle; `None` while an operation uses it.
    pub(crate) fn idle_since(&self, id: Uuid) -> Option<Instant> {
        match self.with(|m| m.get(&id).copied()) {
            Some(u) if u.busy > 0 => None,
            Some(u) => Some(u.last),
            None => Some(self.opened),
        }
    }

    /// Forgets every sandbox but `live` (ended ones).
    pub(crate) fn retain(&self, live: &std::collections::HashSet<Uuid>) {
        self.with(|m| m.retain(|id, u| u.busy > 0 || live.contains(id)));
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(u) = m.get_mut(&self.id) {
            u.busy = u.busy.saturating_sub(1);
            u.last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_sandboxes_are_not_idle_and_their_end_is_their_last_use() {
        let a = Activity::default();
        let (x, y) = (Uuid::new_v4(), Uuid::new_v4());
        assert_eq!(a.idle_since(x), Some(a.opened), "never used: since opening");
        a.touch(x);
        let busy = a.begin(y);
        let busy2 = a.begin(y);
        assert_eq!(a.idle_since(y), None);
        drop(busy);
        assert_eq!(a.idle_since(y), None, "one operation still under way");
        drop(busy2);
        assert!(a.idle_since(y).unwrap() >= a.idle_since(x).unwrap());
    }
}
