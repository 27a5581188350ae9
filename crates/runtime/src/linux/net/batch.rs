//! Group commit of nftables changes: starts that arrive together (a burst of creates,
//! entries refilled side by side) share one transaction. A caller queues its set
//! elements and waits for the rules lock; whichever takes it first adds every element
//! queued by then in one netlink batch, and the others find theirs done. A batch that
//! fails is applied again one caller's elements at a time, so each caller gets its own
//! result.

use super::host::RulesLock;
use super::nfset::Elem;
use super::nft;
use crate::RuntimeError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Queued elements and where their result goes.
struct Pending {
    elems: Vec<Elem>,
    done: Arc<Mutex<Option<Result<(), RuntimeError>>>>,
}

/// One queue per rules lock (state dir).
#[derive(Default)]
struct Queue {
    pending: Mutex<Vec<Pending>>,
    /// Held by the caller applying a batch; the others wait on it.
    applying: Mutex<()>,
}

fn queue(dir: &Path) -> Arc<Queue> {
    static QUEUES: OnceLock<Mutex<HashMap<PathBuf, Arc<Queue>>>> = OnceLock::new();
    let mut queues = QUEUES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    queues.entry(dir.to_path_buf()).or_default().clone()
}

/// Adds `elems` under the rules lock of `dir`, in one transaction with the elements of
/// callers waiting at the same time.
pub(super) fn add(dir: &Path, elems: Vec<Elem>) -> Result<(), RuntimeError> {
    let q = queue(dir);
    let done = Arc::new(Mutex::new(None));
    q.pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Pending {
            elems,
            done: done.clone(),
        });
    let _applying = q.applying.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(result) = take(&done) {
        return result;
    }
    let batch = std::mem::take(&mut *q.pending.lock().unwrap_or_else(|p| p.into_inner()));
    let locked = RulesLock::take(dir);
    match locked {
        Ok(_rules) => apply_batch(&batch),
        Err(e) => {
            let text = e.to_string();
            for p in &batch {
                set(&p.done, Err(RuntimeError::Network(text.clone())));
            }
        }
    }
    take(&done).unwrap_or_else(|| {
        Err(RuntimeError::Network(
            "the nftables batch lost this change".into(),
        ))
    })
}

/// One transaction for the whole batch; on failure, one per caller.
fn apply_batch(batch: &[Pending]) {
    if batch.len() > 1 {
        let joined: Vec<Elem> = batch.iter().flat_map(|p| p.elems.iter().cloned()).collect();
        if nft::add_sandbox(&joined).is_ok() {
            for p in batch {
                set(&p.done, Ok(()));
            }
            return;
        }
    }
    for p in batch {
        set(&p.done, nft::add_sandbox(&p.elems));
    }
}

fn set(done: &Mutex<Option<Result<(), RuntimeError>>>, result: Result<(), RuntimeError>) {
    *done.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
}

fn take(done: &Mutex<Option<Result<(), RuntimeError>>>) -> Option<Result<(), RuntimeError>> {
    done.lock().unwrap_or_else(|p| p.into_inner()).take()
}
