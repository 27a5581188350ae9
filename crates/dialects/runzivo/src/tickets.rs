//! Terminal tickets: short-lived, single-use, bound to one tenant workspace and one
//! sandbox, kept only as SHA-256 hashes in memory (a restart invalidates them), each with
//! the key that bought it (a ticket of a key revoked since is refused). One buyer (an
//! API key of a workspace; a workspace's console sessions together) holds at most
//! [`MAX_PER_BUYER`] outstanding: past that, a new ticket takes the place of that
//! buyer's oldest, so that a client buying tickets in a loop holds a bounded amount of
//! the server's memory and spends only its own tickets.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a ticket may wait before it is used.
pub const TICKET_TTL: Duration = Duration::from_secs(60);

/// Outstanding tickets one buyer may hold (far more than terminals opened within
/// [`TICKET_TTL`] by any real use).
pub const MAX_PER_BUYER: usize = 256;

/// What a ticket grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub workspace: String,
    pub sandbox_id: String,
}

#[derive(Debug)]
struct Entry {
    grant: Grant,
    /// The API key that bought the ticket (none: a console session did).
    key: Option<uuid::Uuid>,
    expires: Instant,
    /// Its place in the order of issue (the oldest goes first past the bound).
    issued: u64,
}

/// The outstanding tickets.
#[derive(Debug, Default)]
pub struct Tickets {
    by_hash: Mutex<HashMap<String, Entry>>,
    issued: std::sync::atomic::AtomicU64,
}

fn hash(ticket: &str) -> String {
    hex::encode(Sha256::digest(ticket.as_bytes()))
}

impl Tickets {
    /// Issues a ticket for `grant`, bought by `key` (none: a console session), valid for
    /// `ttl`.
    pub fn issue(&self, grant: Grant, key: Option<uuid::Uuid>, ttl: Duration) -> String {
        let random = || uuid::Uuid::new_v4().simple().to_string();
        let ticket = format!("tkt_{}{}", random(), random());
        let now = Instant::now();
        let mut map = self.by_hash.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, e| e.expires > now);
        let of_buyer = || {
            map.iter()
                .filter(|(_, e)| e.key == key && e.grant.workspace == grant.workspace)
        };
        if of_buyer().count() >= MAX_PER_BUYER {
            let oldest = of_buyer()
                .min_by_key(|(_, e)| e.issued)
                .map(|(h, _)| h.clone());
            if let Some(oldest) = oldest {
                map.remove(&oldest);
            }
        }
        map.insert(
            hash(&ticket),
            Entry {
                grant,
                key,
                expires: now + ttl,
                issued: self
                    .issued
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            },
        );
        ticket
    }

    /// Uses up `ticket` if it is outstanding, unexpired and grants `want`: then `Some`
    /// of the key that bought it (still to be checked for a revoke).
    pub fn redeem(&self, ticket: &str, want: &Grant) -> Option<Option<uuid::Uuid>> {
        let mut map = self.by_hash.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&hash(ticket))
            .filter(|e| e.expires > Instant::now() && &e.grant == want)
            .map(|e| e.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: Option<uuid::Uuid> = Some(uuid::Uuid::nil());

    fn grant(sandbox: &str) -> Grant {
        Grant {
            workspace: "ws".into(),
            sandbox_id: sandbox.into(),
        }
    }

    #[test]
    fn single_use_bound_and_expiring() {
        let t = Tickets::default();
        let a = t.issue(grant("a"), KEY, TICKET_TTL);
        assert!(t.redeem("tkt_forged", &grant("a")).is_none());
        assert_eq!(t.redeem(&a, &grant("a")), Some(KEY));
        assert!(t.redeem(&a, &grant("a")).is_none(), "reuse");
        let b = t.issue(grant("b"), KEY, TICKET_TTL);
        assert!(t.redeem(&b, &grant("a")).is_none(), "other sandbox");
        assert!(
            t.redeem(&b, &grant("b")).is_none(),
            "a refused ticket is spent"
        );
        let c = t.issue(grant("c"), KEY, Duration::ZERO);
        assert!(t.redeem(&c, &grant("c")).is_none(), "expired");
    }

    #[test]
    fn a_buyer_past_its_bound_spends_its_oldest_ticket_only() {
        let t = Tickets::default();
        let other_key = Some(uuid::Uuid::from_u128(7));
        let other = Grant {
            workspace: "other".into(),
            sandbox_id: "a".into(),
        };
        let others = t.issue(other.clone(), KEY, TICKET_TTL);
        let same_workspace = t.issue(grant("a"), other_key, TICKET_TTL);
        let issued: Vec<String> = (0..=MAX_PER_BUYER)
            .map(|_| t.issue(grant("a"), KEY, TICKET_TTL))
            .collect();
        let held = t.by_hash.lock().expect("lock").len();
        assert_eq!(held, MAX_PER_BUYER + 2, "the bound and the other buyers'");
        assert!(
            t.redeem(&issued[0], &grant("a")).is_none(),
            "the oldest is spent"
        );
        assert_eq!(t.redeem(&issued[1], &grant("a")), Some(KEY));
        assert_eq!(t.redeem(&issued[MAX_PER_BUYER], &grant("a")), Some(KEY));
        assert_eq!(t.redeem(&others, &other), Some(KEY), "another workspace's");
        assert_eq!(
            t.redeem(&same_workspace, &grant("a")),
            Some(other_key),
            "another key's of the same workspace"
        );
    }
}
