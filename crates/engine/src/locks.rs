//! Per-sandbox reader/writer locks: runtime operations share, lifecycle changes exclude.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::RwLock;
use uuid::Uuid;

/// Lazily created lock per sandbox id.
#[derive(Default)]
pub(crate) struct Locks {
    map: Mutex<HashMap<Uuid, Arc<RwLock<()>>>>,
}

impl Locks {
    pub(crate) fn get(&self, id: Uuid) -> Arc<RwLock<()>> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        // Drop locks nobody holds any more so the table does not grow forever.
        if map.len() > 1024 {
            map.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        map.entry(id).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn same_id_same_lock() {
        let locks = Locks::default();
        let id = Uuid::new_v4();
        let held = locks.get(id).write_owned().await;
        assert!(
            locks.get(id).try_read().is_err(),
            "a writer excludes readers"
        );
        assert!(locks.get(Uuid::new_v4()).try_read().is_ok());
        drop(held);
        assert!(locks.get(id).try_read().is_ok());
    }
}
