//! Group commit of nftables changes: starts that arrive together (a burst of creates,
//! entries refilled side by side) share one transaction. A caller queues its set
//! elements and waits for the rules lock; whichever takes it first adds every element
//! queued by then in one netlink batch (several when many are queued, each holding
//! whole callers), and the others find theirs done. A batch that fails is applied
//! again one caller's elements at a time, so each caller gets its own result.

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

/// A joined transaction takes callers until it holds about this many elements (a
/// caller's are never split), so a burst makes a few transactions of bounded size.
const JOINED_ELEMENTS: usize = 1024;

/// The batch in runs of whole callers of at most [`JOINED_ELEMENTS`] elements (or
/// one caller, however many it has).
fn runs<T>(batch: &[T], len: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut elems) = (0, 0);
    for (i, p) in batch.iter().enumerate() {
        if i > start && elems + len(p) > JOINED_ELEMENTS {
            out.push(&batch[start..i]);
            (start, elems) = (i, 0);
        }
        elems += len(p);
    }
    if start < batch.len() {
        out.push(&batch[start..]);
    }
    out
}

/// One transaction per run of callers; on failure, one per caller of the run.
fn apply_batch(batch: &[Pending]) {
    for run in runs(batch, |p| p.elems.len()) {
        apply_run(run);
    }
}

/// One transaction for `batch`; on failure, one per caller.
fn apply_run(batch: &[Pending]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::net::nfset;
    use crate::linux::net::nft::{SandboxRules, TABLE};
    use crate::linux::net::policy::Policy;
    use crate::Cidr;
    use std::net::Ipv4Addr;

    #[test]
    fn runs_hold_whole_callers_and_bound_the_joined_ones() {
        let sizes = [600, 600, 10, 2000, 1, 1];
        let r = runs(&sizes, |n| *n);
        assert_eq!(r, [&[600][..], &[600, 10], &[2000], &[1, 1]]);
        assert!(runs(&[] as &[usize], |n| *n).is_empty());
    }

    fn sandboxes(n: u32, policy: &Policy) -> Vec<Vec<Elem>> {
        let resolvers = [Ipv4Addr::new(192, 0, 2, 53)];
        (0..n)
            .map(|i| {
                let base = u32::from(Ipv4Addr::new(10, 213, 0, 0)) + 4 * i;
                nft::sandbox_elements(&SandboxRules {
                    ifname: &format!("sbx{i:012}"),
                    net: Cidr {
                        addr: Ipv4Addr::from(base),
                        prefix: 30,
                    },
                    addr: Ipv4Addr::from(base + 2),
                    resolvers: &resolvers,
                    policy,
                })
            })
            .collect()
    }

    fn restricted() -> Policy {
        let cidrs = |l: &[&str]| l.iter().map(|c| c.parse().expect("cidr")).collect();
        Policy {
            deny: cidrs(&["198.18.0.9", "10.0.0.0/8"]),
            allow: vec![cidrs(&["198.18.0.0/15"])],
        }
    }

    fn fresh_table() {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
        nft::apply(&nft::base_table(false)).expect("the table");
    }

    /// A large joined add (one transaction of 40 sandboxes, then of 400) reports the
    /// success it is, with every element in place: its replies fit the socket, and the
    /// send fits its buffer (in a network namespace of the test's own; needs root).
    #[test]
    fn a_large_joined_add_reports_its_commit() {
        fresh_table();
        let policy = restricted();
        for (from, n) in [(0, 40), (40, 400)] {
            let all = sandboxes(from + n, &policy);
            let joined: Vec<Elem> = all[from as usize..].concat();
            nft::add_sandbox(&joined).expect("the joined add");
            let now = nfset::list("dispatch").expect("dispatch");
            assert_eq!(now.len(), (from + n) as usize, "{TABLE}: dispatch");
            assert!(nfset::list("allow").expect("allow").len() >= (from + n) as usize);
        }
    }

    /// A burst of 400 starts queued together: each caller is told it succeeded and its
    /// elements are all there.
    #[test]
    fn a_burst_of_starts_is_committed_in_bounded_transactions() {
        fresh_table();
        let policy = restricted();
        let pending: Vec<Pending> = sandboxes(400, &policy)
            .into_iter()
            .map(|elems| Pending {
                elems,
                done: Arc::new(Mutex::new(None)),
            })
            .collect();
        assert!(
            runs(&pending, |p| p.elems.len()).len() > 1,
            "several transactions"
        );
        apply_batch(&pending);
        for (i, p) in pending.iter().enumerate() {
            match take(&p.done) {
                Some(Ok(())) => {}
                other => panic!("caller {i}: {other:?}"),
            }
        }
        for set in ["dispatch", "owners", "restricted", "nat_sources"] {
            assert_eq!(nfset::list(set).expect("list").len(), 400, "{set}");
        }
        let all: Vec<Elem> = pending.iter().flat_map(|p| p.elems.clone()).collect();
        assert!(nfset::in_place(&all, &[]).expect("read back"));
        let gone = &pending[7].elems;
        nfset::commit(&[], gone).expect("remove one");
        assert!(!nfset::in_place(&all, &[]).expect("read back"));
        assert!(nfset::in_place(&[], gone).expect("read back"));
    }
}
