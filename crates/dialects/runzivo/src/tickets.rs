//! Terminal tickets: short-lived, single-use, bound to one tenant workspace and one
//! sandbox, kept only as SHA-256 hashes in memory (a restart invalidates them).

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a ticket may wait before it is used.
pub const TICKET_TTL: Duration = Duration::from_secs(60);

/// What a ticket grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub workspace: String,
    pub sandbox_id: String,
}

#[derive(Debug)]
struct Entry {
    grant: Grant,
    expires: Instant,
}

/// The outstanding tickets.
#[derive(Debug, Default)]
pub struct Tickets {
    by_hash: Mutex<HashMap<String, Entry>>,
}

fn hash(ticket: &str) -> String {
    hex::encode(Sha256::digest(ticket.as_bytes()))
}

impl Tickets {
    /// Issues a ticket for `grant`, valid for `ttl`.
    pub fn issue(&self, grant: Grant, ttl: Duration) -> String {
        let random = || uuid::Uuid::new_v4().simple().to_string();
        let ticket = format!("tkt_{}{}", random(), random());
        let now = Instant::now();
        let mut map = self.by_hash.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, e| e.expires > now);
        map.insert(
            hash(&ticket),
            Entry {
                grant,
                expires: now + ttl,
            },
        );
        ticket
    }

    /// Uses up `ticket` if it is outstanding, unexpired and grants `want`.
    pub fn redeem(&self, ticket: &str, want: &Grant) -> bool {
        let mut map = self.by_hash.lock().unwrap_or_else(|e| e.into_inner());
        match map.remove(&hash(ticket)) {
            Some(e) => e.expires > Instant::now() && &e.grant == want,
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(sandbox: &str) -> Grant {
        Grant {
            workspace: "ws".into(),
            sandbox_id: sandbox.into(),
        }
    }

    #[test]
    fn single_use_bound_and_expiring() {
        let t = Tickets::default();
        let a = t.issue(grant("a"), TICKET_TTL);
        assert!(!t.redeem("tkt_forged", &grant("a")));
        assert!(t.redeem(&a, &grant("a")));
        assert!(!t.redeem(&a, &grant("a")), "reuse");
        let b = t.issue(grant("b"), TICKET_TTL);
        assert!(!t.redeem(&b, &grant("a")), "other sandbox");
        assert!(!t.redeem(&b, &grant("b")), "a refused ticket is spent");
        let c = t.issue(grant("c"), Duration::ZERO);
        assert!(!t.redeem(&c, &grant("c")), "expired");
    }
}
