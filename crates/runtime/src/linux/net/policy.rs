//! A sandbox's policy layers resolved to what its set elements enforce, comparable so that a
//! warm entry made for one policy serves the next start under it; domain rules resolve
//! through a small cache that keeps each answer for its TTL (see `dns`).

use super::{dns, nft};
use crate::{Cidr, EgressRule, NetworkSpec};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

/// What a sandbox's set elements enforce: the union of its layers' deny lists, and one allow
/// list per layer that has one. Open (both empty) is the default: egress only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub deny: Vec<Cidr>,
    pub allow: Vec<Vec<Cidr>>,
}

impl Policy {
    /// Whether it adds nothing to the default (egress-only) rules.
    pub fn is_open(&self) -> bool {
        self.deny.is_empty() && self.allow.is_empty()
    }

    /// Whether no destination passes it: its allow layers have nothing in common, or its
    /// deny ranges and what no sandbox may reach (`nft::blocked`: loopback, metadata…)
    /// cover what they allow (`deny 0.0.0.0/0`). A sandbox under such a
    /// policy is given no DNS either: a query to its resolvers reaches whoever serves
    /// the name asked for, a way out for data that the policy means to close.
    pub fn reaches_nothing(&self) -> bool {
        let mut allowed = vec![(0u32, u32::MAX)];
        for layer in &self.allow {
            allowed = nft::intersect(&allowed, &nft::ranges(layer));
        }
        let mut denied = nft::blocked();
        denied.extend_from_slice(&self.deny);
        let denied = nft::ranges(&denied);
        // Merged ranges are disjoint and apart: one of them covers a range, or none.
        allowed
            .iter()
            .all(|&(s, e)| denied.iter().any(|&(ds, de)| ds <= s && e <= de))
    }
}

/// Answers by (resolvers, port, name), each with the instant it expires.
type Answers = HashMap<(Vec<Ipv4Addr>, u16, String), (Vec<Ipv4Addr>, Instant)>;

/// Entries past this many are dropped when expired (a bound on a long-lived server's
/// cache; live ones are few: the domains of the policies in use).
const CACHE_SWEEP_AT: usize = 1024;

static CACHE: LazyLock<Mutex<Answers>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The addresses `name` has now through `resolvers`: the cached answer while its TTL
/// lasts, else a fresh query (only to those resolvers).
pub fn lookup(name: &str, resolvers: &[Ipv4Addr]) -> Vec<Ipv4Addr> {
    lookup_at(name, resolvers, 53)
}

/// [`lookup`] with resolvers listening on `port`.
fn lookup_at(name: &str, resolvers: &[Ipv4Addr], port: u16) -> Vec<Ipv4Addr> {
    let key = (resolvers.to_vec(), port, name.to_ascii_lowercase());
    let now = Instant::now();
    if let Ok(cache) = CACHE.lock() {
        if let Some((addrs, until)) = cache.get(&key) {
            if *until > now {
                return addrs.clone();
            }
        }
    }
    let (addrs, ttl) = dns::resolve_a(name, resolvers, port);
    if let Ok(mut cache) = CACHE.lock() {
        if cache.len() >= CACHE_SWEEP_AT {
            cache.retain(|_, (_, until)| *until > now);
        }
        cache.insert(key, (addrs.clone(), Instant::now() + ttl));
    }
    addrs
}

/// Turns the policy layers into CIDRs. Domains are the addresses they have at start
/// (through [`lookup`]).
pub fn resolve(network: &NetworkSpec, resolvers: &[Ipv4Addr]) -> Policy {
    let lookups: Vec<(String, Vec<Ipv4Addr>)> = network
        .domains()
        .into_iter()
        .map(|d| {
            let addrs = lookup(&d, resolvers);
            (d, addrs)
        })
        .collect();
    let cidrs = |rules: &[EgressRule]| -> Vec<Cidr> {
        rules
            .iter()
            .flat_map(|r| match r {
                EgressRule::Cidr(c) => vec![*c],
                EgressRule::Domain(d) => lookups
                    .iter()
                    .filter(|(n, _)| n == d)
                    .flat_map(|(_, a)| a.iter().map(|&addr| Cidr { addr, prefix: 32 }))
                    .collect(),
            })
            .collect()
    };
    Policy {
        deny: network.layers.iter().flat_map(|l| cidrs(&l.deny)).collect(),
        allow: network
            .layers
            .iter()
            .filter(|l| !l.allow.is_empty())
            .map(|l| cidrs(&l.allow))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().expect("cidr")).collect()
    }

    #[test]
    fn a_policy_reaches_nothing_only_when_no_address_passes_it() {
        let policy = |deny: &[&str], allow: &[&[&str]]| Policy {
            deny: cidrs(deny),
            allow: allow.iter().map(|l| cidrs(l)).collect(),
        };
        assert!(!Policy::default().reaches_nothing());
        assert!(policy(&["0.0.0.0/0"], &[]).reaches_nothing());
        assert!(policy(&["0.0.0.0/1", "128.0.0.0/1"], &[]).reaches_nothing());
        assert!(!policy(&["0.0.0.0/1"], &[]).reaches_nothing());
        // An allow layer with nothing in it (a domain that resolved to nothing).
        assert!(policy(&[], &[&[]]).reaches_nothing());
        // Allow layers with nothing in common.
        assert!(policy(&[], &[&["10.0.0.0/8"], &["192.168.0.0/16"]]).reaches_nothing());
        assert!(!policy(&[], &[&["10.0.0.0/8"], &["10.1.0.0/16"]]).reaches_nothing());
        // What they allow, denied; or only part of it.
        assert!(policy(&["10.0.0.0/8"], &[&["10.1.0.0/16"]]).reaches_nothing());
        assert!(!policy(&["10.1.0.0/16"], &[&["10.0.0.0/8"]]).reaches_nothing());
        assert!(!policy(&["10.0.0.1"], &[&["10.0.0.0/31"]]).reaches_nothing());
        // Only what no sandbox may reach anyway (metadata, loopback).
        assert!(policy(&[], &[&["169.254.169.254"]]).reaches_nothing());
        assert!(policy(&[], &[&["127.0.0.1", "169.254.0.0/16"]]).reaches_nothing());
        assert!(!policy(&[], &[&["127.0.0.1", "192.0.2.1"]]).reaches_nothing());
    }
    use std::net::UdpSocket;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// A resolver on loopback answering every A query with `addr` and TTL `ttl`; its
    /// port, and how many queries it answered.
    fn fake_resolver(addr: [u8; 4], ttl: u32) -> (u16, Arc<AtomicUsize>) {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let port = sock.local_addr().expect("addr").port();
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = sock.recv_from(&mut buf) {
                let mut r = buf[..n].to_vec();
                r[2] |= 0x80;
                r[7] = 1;
                r.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1]);
                r.extend_from_slice(&ttl.to_be_bytes());
                r.extend_from_slice(&[0, 4]);
                r.extend_from_slice(&addr);
                seen.fetch_add(1, Ordering::SeqCst);
                let _ = sock.send_to(&r, from);
            }
        });
        (port, count)
    }

    #[test]
    fn answers_are_kept_for_their_ttl_only() {
        let (port, count) = fake_resolver([198, 18, 0, 7], 3600);
        let resolvers = [Ipv4Addr::LOCALHOST];
        let want = [Ipv4Addr::new(198, 18, 0, 7)];
        assert_eq!(lookup_at("cached.test", &resolvers, port), want);
        assert_eq!(lookup_at("CACHED.test", &resolvers, port), want);
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "a live answer is not asked again"
        );
        let key = (resolvers.to_vec(), port, "cached.test".to_string());
        let until = CACHE.lock().expect("cache").get(&key).expect("cached").1;
        assert!(
            until <= Instant::now() + dns::MAX_TTL,
            "an hour's TTL is kept at most MAX_TTL"
        );
        // Expired: asked again.
        CACHE.lock().expect("cache").insert(
            key,
            (
                vec![Ipv4Addr::new(198, 18, 0, 8)],
                Instant::now() - Duration::from_secs(1),
            ),
        );
        assert_eq!(lookup_at("cached.test", &resolvers, port), want);
        assert_eq!(
            count.load(Ordering::SeqCst),
            2,
            "an expired answer was served"
        );
    }
}
