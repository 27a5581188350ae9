//! Counting the streamed commands running in each sandbox, so a limit can refuse one more.

use crate::error::{EngineError, ErrorCode};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Running streamed commands per sandbox.
#[derive(Debug, Default, Clone)]
pub(crate) struct Sessions {
    counts: Arc<Mutex<HashMap<Uuid, usize>>>,
}

/// One admitted command; releases its slot when dropped.
#[derive(Debug)]
pub(crate) struct Session {
    counts: Arc<Mutex<HashMap<Uuid, usize>>>,
    sandbox: Uuid,
}

impl Sessions {
    /// Admits one more command in `sandbox`, or `SessionLimitReached` when `max` run.
    pub(crate) fn acquire(&self, sandbox: Uuid, max: usize) -> Result<Session, EngineError> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(sandbox).or_insert(0);
        if *n >= max {
            return Err(EngineError::new(
                ErrorCode::SessionLimitReached,
                format!("sandbox {sandbox} already runs {max} commands"),
            ));
        }
        *n += 1;
        Ok(Session {
            counts: self.counts.clone(),
            sandbox,
        })
    }

    /// Whether a streamed command runs in `sandbox`.
    pub(crate) fn running(&self, sandbox: Uuid) -> bool {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(&sandbox).is_some_and(|n| *n > 0)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.sandbox) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.sandbox);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_limit_and_frees_on_drop() {
        let sessions = Sessions::default();
        let id = Uuid::new_v4();
        let held: Vec<Session> = (0..4).map(|_| sessions.acquire(id, 4).unwrap()).collect();
        let err = sessions.acquire(id, 4).unwrap_err();
        assert_eq!(err.code, ErrorCode::SessionLimitReached);
        assert!(sessions.acquire(Uuid::new_v4(), 4).is_ok());
        drop(held);
        assert!(sessions.acquire(id, 4).is_ok());
        assert!(sessions.counts.lock().unwrap().is_empty());
    }
}
