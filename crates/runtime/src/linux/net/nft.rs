//! The nftables ruleset: one `inet` table of sandboxd's own whose chains are shared by
//! every sandbox and made once (a script, see `apply`), and per sandbox only set
//! elements keyed by its interface name, added and removed in-process in one netlink
//! transaction per change (see `nfset`): no `nft` process and no rule rebuilt.

use super::nfset::{self, Elem};
use super::policy::Policy;
use crate::{Cidr, RuntimeError};
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// The table every sandboxd on this host shares.
pub const TABLE: &str = "sandboxd";
/// Host-side interface names of sandboxes start with this.
pub const IF_PREFIX: &str = "sbx";

/// Destinations no sandbox may reach: "this" network, loopback, link-local (the usual
/// metadata address, 169.254.169.254), the cloud metadata services outside it
/// (Alibaba's 100.100.100.200, Azure's WireServer 168.63.129.16), multicast, reserved
/// and broadcast. Sandbox networks are in `nets` (their /30s' network addresses). The
/// rest of 100.64.0.0/10 (carrier-grade NAT, also Tailscale's peers) stays reachable.
const BLOCKED: &str =
    "0.0.0.0/8, 100.100.100.200/32, 127.0.0.0/8, 168.63.129.16/32, 169.254.0.0/16, 224.0.0.0/3";

/// [`BLOCKED`] as CIDRs.
pub fn blocked() -> Vec<Cidr> {
    BLOCKED.split(", ").filter_map(|c| c.parse().ok()).collect()
}

/// Per-sandbox sets and maps keyed by (or starting with) the sandbox's interface name.
const BY_IFNAME: [&str; 6] = ["dispatch", "owners", "dns", "deny", "restricted", "allow"];
/// Of those, the ones a policy fills.
const POLICY_SETS: [&str; 3] = ["deny", "restricted", "allow"];

/// The shared table as an `nft` script: what `nftable::make` sends over netlink (a
/// test compares the two, listed by `nft`), and the reference for reading it. With `guard`, forwarding that involves no sandbox is dropped (set
/// when sandboxd itself turned `ip_forward` on, so the host does not become a router).
///
/// A packet from a sandbox (its interface `sbx*`) is dispatched by interface name to
/// `egress` (see [`egress_script`]); an interface not in `dispatch` sends nothing.
/// The base chains, `nets`, `nat_sources` and `dispatch` are as sandboxd made them
/// when each sandbox had a chain of its own, so sandboxes of both kinds can share a
/// table while a host upgrades.
#[cfg(test)]
pub fn base_table(guard: bool) -> String {
    let p = IF_PREFIX;
    format!(
        "table inet {TABLE} {{
  set blocked {{ type ipv4_addr; flags interval; auto-merge; elements = {{ {BLOCKED} }} }}
  set nets {{ type ipv4_addr; flags interval; }}
  set nat_sources {{ type ipv4_addr; }}
  map dispatch {{ type ifname : verdict; }}
  chain forward {{
    type filter hook forward priority filter - 5; policy accept;
    iifname \"{p}*\" iifname vmap @dispatch
    iifname \"{p}*\" drop
    oifname \"{p}*\" ct state established,related accept
    oifname \"{p}*\" drop
{guard}  }}
  chain input {{
    type filter hook input priority filter - 5; policy accept;
    iifname \"{p}*\" drop
  }}
  chain output {{
    type filter hook output priority filter - 5; policy accept;
    oifname \"{p}*\" ct state established,related accept
    oifname \"{p}*\" drop
  }}
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    oifname != \"{p}*\" ip saddr @nat_sources masquerade
  }}
}}
{egress}",
        guard = if guard { "    drop\n" } else { "" },
        egress = egress_script(),
    )
}

/// The chain every sandbox's packets go through and the sets it looks up, keyed by the
/// interface name: its own address (`owners`), its resolvers (`dns`), its deny ranges,
/// and, when its policy narrows egress (`restricted`), the ranges every allow layer
/// allows. Idempotent: it also adds them to a table made before they existed.
pub fn egress_script() -> String {
    let t = TABLE;
    let mut s = String::new();
    for set in [
        "owners { type ifname . ipv4_addr; }",
        "dns { type ifname . ipv4_addr; }",
        "deny { type ifname . ipv4_addr; flags interval; }",
        "restricted { type ifname; }",
        "allow { type ifname . ipv4_addr; flags interval; }",
    ] {
        s += &format!("add set inet {t} {set}\n");
    }
    s += &format!("add chain inet {t} egress\nflush chain inet {t} egress\n");
    for rule in [
        "iifname . ip saddr != @owners drop",
        "meta nfproto ipv6 drop",
        "ip daddr @blocked drop",
        "ip daddr @nets drop",
        "iifname . ip daddr @dns meta l4proto { tcp, udp } th dport 53 accept",
        "iifname . ip daddr @deny drop",
        "iifname @restricted iifname . ip daddr != @allow drop",
        "accept",
    ] {
        s += &format!("add rule inet {t} egress {rule}\n");
    }
    s
}

/// What one sandbox's entries enforce, with domains already resolved.
pub struct SandboxRules<'a> {
    pub ifname: &'a str,
    pub net: Cidr,
    pub addr: Ipv4Addr,
    pub resolvers: &'a [Ipv4Addr],
    pub policy: &'a Policy,
}

/// An interface name as the kernel compares it: `IFNAMSIZ` bytes, zero-padded.
fn ifname_key(ifname: &str) -> Vec<u8> {
    let mut key = vec![0u8; 16];
    let name = ifname.as_bytes();
    key[..name.len().min(15)].copy_from_slice(&name[..name.len().min(15)]);
    key
}

fn concat(ifname: &str, addr: u32) -> Vec<u8> {
    let mut key = ifname_key(ifname);
    key.extend_from_slice(&addr.to_be_bytes());
    key
}

fn single(set: &'static str, key: Vec<u8>) -> Elem {
    Elem {
        set,
        key,
        key_end: None,
        end: false,
        jump: None,
    }
}

/// The two elements of `nets` bounding a sandbox's /30 (start, and end one past it).
fn net_elements(net: Cidr) -> [Elem; 2] {
    let start = u32::from(net.network());
    [
        single("nets", start.to_be_bytes().to_vec()),
        Elem {
            end: true,
            ..single("nets", start.wrapping_add(4).to_be_bytes().to_vec())
        },
    ]
}

/// Inclusive address ranges of `cidrs`, sorted and merged (overlapping or adjacent
/// ones joined: an interval set takes no overlaps).
pub fn ranges(cidrs: &[Cidr]) -> Vec<(u32, u32)> {
    let mut r: Vec<(u32, u32)> = cidrs
        .iter()
        .map(|c| {
            let start = u32::from(c.network());
            let host = u32::MAX.checked_shr(u32::from(c.prefix)).unwrap_or(0);
            (start, start | host)
        })
        .collect();
    r.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(r.len());
    for (s, e) in r {
        match out.last_mut() {
            Some(last) if u64::from(s) <= u64::from(last.1) + 1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The ranges in both `a` and `b` (each sorted and merged).
pub fn intersect(a: &[(u32, u32)], b: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if s <= e {
            out.push((s, e));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The elements a sandbox's policy adds: its deny ranges (the union of its layers'),
/// and when it has allow layers, its name in `restricted` and the ranges all of them
/// allow (none: it reaches nothing, its resolvers neither: see [`dns_for`]).
pub fn policy_elements(ifname: &str, policy: &Policy) -> Vec<Elem> {
    let range = |set, (s, e): (u32, u32)| Elem {
        key_end: Some(concat(ifname, e)),
        ..single(set, concat(ifname, s))
    };
    let mut out: Vec<Elem> = ranges(&policy.deny)
        .into_iter()
        .map(|r| range("deny", r))
        .collect();
    let mut layers = policy.allow.iter().map(|l| ranges(l));
    if let Some(first) = layers.next() {
        let allowed = layers.fold(first, |acc, l| intersect(&acc, &l));
        out.push(single("restricted", ifname_key(ifname)));
        out.extend(allowed.into_iter().map(|r| range("allow", r)));
    }
    out
}

/// The resolvers a sandbox under `policy` may reach over DNS: `resolvers`, none when
/// the policy lets nothing through (see [`Policy::reaches_nothing`]).
pub fn dns_for<'a>(policy: &Policy, resolvers: &'a [Ipv4Addr]) -> &'a [Ipv4Addr] {
    match policy.reaches_nothing() {
        true => &[],
        false => resolvers,
    }
}

/// The elements letting the sandbox on `ifname` reach `resolvers` over DNS.
fn dns_elements(ifname: &str, resolvers: &[Ipv4Addr]) -> Vec<Elem> {
    resolvers
        .iter()
        .map(|d| single("dns", concat(ifname, u32::from(*d))))
        .collect()
}

/// Every element of a sandbox: its /30 among the sandbox networks, its address as a
/// NAT source and as its interface's own, its resolvers, its policy's, and last (once
/// the rest is in place) its interface's entry to `egress`.
pub fn sandbox_elements(r: &SandboxRules) -> Vec<Elem> {
    let mut out = Vec::from(net_elements(r.net));
    out.extend([
        single("nat_sources", r.addr.octets().to_vec()),
        single("owners", concat(r.ifname, u32::from(r.addr))),
    ]);
    out.extend(dns_elements(r.ifname, dns_for(r.policy, r.resolvers)));
    out.extend(policy_elements(r.ifname, r.policy));
    out.push(Elem {
        jump: Some("egress"),
        ..single("dispatch", ifname_key(r.ifname))
    });
    out
}

/// The elements of `set` now; none when it (or the table) is not there.
fn present(set: &'static str) -> std::io::Result<Vec<Elem>> {
    match nfset::list(set) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Vec::new()),
        other => other,
    }
}

/// The elements of `sets` that are `ifname`'s, as the kernel has them now.
fn owned(ifname: &str, sets: &[&'static str]) -> std::io::Result<Vec<Elem>> {
    let prefix = ifname_key(ifname);
    let mut out = Vec::new();
    for set in sets {
        out.extend(
            present(set)?
                .into_iter()
                .filter(|e| e.key.starts_with(&prefix)),
        );
    }
    Ok(out)
}

fn nft_err(what: &str, e: std::io::Error) -> RuntimeError {
    RuntimeError::Network(format!("nftables ({what}): {e}"))
}

/// Adds a sandbox's elements in one transaction. A table made before `egress`
/// existed (by an older sandboxd, its sandboxes still running) gets it first.
pub fn add_sandbox(elems: &[Elem]) -> Result<(), RuntimeError> {
    let what = "adding a sandbox's entries";
    match nfset::commit(elems, &[]) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            tracing::info!("adding the egress chain to a table an older sandboxd made");
            apply(&egress_script())?;
            nfset::commit(elems, &[]).map_err(|e| nft_err(what, e))
        }
        other => other.map_err(|e| nft_err(what, e)),
    }
}

/// Gives the sandbox on `ifname` `policy` instead of the one it had: its policy
/// elements as they are now removed and the new ones added, and its DNS entries those
/// the new policy lets it have of `resolvers` (see [`dns_for`]), in one transaction.
pub fn retarget(ifname: &str, policy: &Policy, resolvers: &[Ipv4Addr]) -> Result<(), RuntimeError> {
    let what = "changing a sandbox's policy";
    let mut old = owned(ifname, &POLICY_SETS).map_err(|e| nft_err(what, e))?;
    let mut new = policy_elements(ifname, policy);
    let (dns_add, dns_del) =
        resolver_changes(ifname, dns_for(policy, resolvers)).map_err(|e| nft_err(what, e))?;
    new.extend(dns_add);
    old.extend(dns_del);
    nfset::commit(&new, &old).map_err(|e| nft_err(what, e))
}

/// The DNS elements the sandbox on `ifname` lacks to reach `resolvers`, and those it
/// has of other resolvers, as the kernel has them now.
fn resolver_changes(
    ifname: &str,
    resolvers: &[Ipv4Addr],
) -> std::io::Result<(Vec<Elem>, Vec<Elem>)> {
    let old = owned(ifname, &["dns"])?;
    let new = dns_elements(ifname, resolvers);
    let missing = |from: &[Elem], of: &[Elem]| -> Vec<Elem> {
        from.iter()
            .filter(|e| !of.iter().any(|o| o.same(e)))
            .cloned()
            .collect()
    };
    Ok((missing(&new, &old), missing(&old, &new)))
}

/// Whether the sandbox on `ifname` may reach over DNS exactly `resolvers`.
pub fn has_resolvers(ifname: &str, resolvers: &[Ipv4Addr]) -> Result<bool, RuntimeError> {
    let (add, del) = resolver_changes(ifname, resolvers)
        .map_err(|e| nft_err("reading a sandbox's resolvers", e))?;
    Ok(add.is_empty() && del.is_empty())
}

/// Lets the sandbox on `ifname` reach `resolvers` over DNS and no other resolver: the
/// elements it lacks added and those of other resolvers removed, in one transaction
/// (none when it has them already).
pub fn set_resolvers(ifname: &str, resolvers: &[Ipv4Addr]) -> Result<(), RuntimeError> {
    let what = "changing a sandbox's resolvers";
    let (add, del) = resolver_changes(ifname, resolvers).map_err(|e| nft_err(what, e))?;
    nfset::commit(&add, &del).map_err(|e| nft_err(what, e))
}

/// Removes every element of the sandbox on `ifname` (and with `net`, its /30 and
/// address) that exists, in one transaction: idempotent, and whole after a crash.
pub fn remove_sandbox(ifname: &str, net: Option<(Cidr, Ipv4Addr)>) -> Result<(), RuntimeError> {
    let what = "removing a sandbox's entries";
    let mut del = owned(ifname, &BY_IFNAME).map_err(|e| nft_err(what, e))?;
    if let Some((net, addr)) = net {
        let nets = present("nets").map_err(|x| nft_err(what, x))?;
        let sources = present("nat_sources").map_err(|x| nft_err(what, x))?;
        let [start, end] = net_elements(net);
        let source = single("nat_sources", addr.octets().to_vec());
        for (e, present) in [(start, &nets), (end, &nets), (source, &sources)] {
            if present.iter().any(|p| p.same(&e)) {
                del.push(e);
            }
        }
    }
    nfset::commit(&[], &del).map_err(|e| nft_err(what, e))
}

/// Runs an nft script atomically (all of it or nothing).
pub fn apply(script: &str) -> Result<(), RuntimeError> {
    match super::libnft::run(script) {
        Some(result) => result.map_err(|e| RuntimeError::Network(format!("nft: {e}"))),
        None => apply_with_binary(script),
    }
}

/// [`apply`] through a spawned `nft -f -`.
fn apply_with_binary(script: &str) -> Result<(), RuntimeError> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RuntimeError::Network(format!("running nft (install nftables): {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| RuntimeError::Network(format!("writing to nft: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| RuntimeError::Network(format!("waiting for nft: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(RuntimeError::Network(format!(
            "nft: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().expect("cidr")).collect()
    }

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().expect("ip"))
    }

    #[test]
    fn every_blocked_range_parses() {
        assert_eq!(blocked().len(), BLOCKED.split(", ").count());
    }

    #[test]
    fn ranges_merge_overlaps_and_neighbours() {
        let r = ranges(&cidrs(&[
            "10.0.0.0/8",
            "10.1.0.0/16",
            "11.0.0.0/8",
            "192.0.2.9",
            "0.0.0.0/0",
        ]));
        assert_eq!(r, [(0, u32::MAX)]);
        let r = ranges(&cidrs(&[
            "192.0.2.9",
            "10.1.0.0/16",
            "10.0.0.0/8",
            "11.0.0.0/8",
        ]));
        assert_eq!(
            r,
            [
                (ip("10.0.0.0"), ip("11.255.255.255")),
                (ip("192.0.2.9"), ip("192.0.2.9"))
            ]
        );
    }

    #[test]
    fn allow_layers_intersect_and_an_empty_one_allows_nothing() {
        let policy = Policy {
            deny: cidrs(&["198.18.0.9"]),
            allow: vec![
                cidrs(&["198.18.0.0/15"]),
                cidrs(&["198.19.0.0/16", "203.0.113.0/24"]),
            ],
        };
        let e = policy_elements("sbxabc", &policy);
        let allow: Vec<_> = e.iter().filter(|e| e.set == "allow").collect();
        assert_eq!(allow.len(), 1);
        assert_eq!(allow[0].key, concat("sbxabc", ip("198.19.0.0")));
        assert_eq!(
            allow[0].key_end,
            Some(concat("sbxabc", ip("198.19.255.255")))
        );
        assert!(e
            .iter()
            .any(|e| e.set == "restricted" && e.key == ifname_key("sbxabc")));
        assert!(e
            .iter()
            .any(|e| e.set == "deny" && e.key == concat("sbxabc", ip("198.18.0.9"))));
        let closed = Policy {
            deny: vec![],
            allow: vec![cidrs(&["10.0.0.0/8"]), vec![]],
        };
        let e = policy_elements("sbxabc", &closed);
        assert_eq!(
            e.iter().map(|e| e.set).collect::<Vec<_>>(),
            ["restricted"],
            "restricted, nothing allowed"
        );
        assert!(
            policy_elements("sbxabc", &Policy::default()).is_empty(),
            "open: no policy entries"
        );
    }

    #[test]
    fn a_sandbox_has_its_address_net_and_resolvers() {
        let policy = Policy::default();
        let r = SandboxRules {
            ifname: "sbxabc",
            net: "10.213.0.4/30".parse().expect("net"),
            addr: Ipv4Addr::new(10, 213, 0, 6),
            resolvers: &[Ipv4Addr::new(192, 0, 2, 53)],
            policy: &policy,
        };
        let e = sandbox_elements(&r);
        let key = |set: &str| e.iter().find(|e| e.set == set).map(|e| e.key.clone());
        assert_eq!(key("nets"), Some(vec![10, 213, 0, 4]));
        let nets: Vec<_> = e.iter().filter(|e| e.set == "nets").collect();
        assert_eq!(
            (nets[1].key.clone(), nets[1].end),
            (vec![10, 213, 0, 8], true)
        );
        let dispatch = e.last().expect("elements");
        assert_eq!((dispatch.set, dispatch.jump), ("dispatch", Some("egress")));
        assert_eq!(key("nat_sources"), Some(vec![10, 213, 0, 6]));
        assert_eq!(key("owners"), Some(concat("sbxabc", ip("10.213.0.6"))));
        assert_eq!(key("dns"), Some(concat("sbxabc", ip("192.0.2.53"))));
        assert_eq!(ifname_key("sbxabc").len(), 16);
        let base = egress_script();
        let table = base_table(false);
        assert!(table.contains("169.254.0.0/16") && table.contains("127.0.0.0/8"));
        assert!(table.ends_with(&base));
        let at = |n: &str| base.find(n).unwrap_or_else(|| panic!("{n} missing"));
        assert!(at("@owners drop") < at("@blocked drop"));
        assert!(at("@blocked drop") < at("@nets drop"));
        assert!(at("@nets drop") < at("th dport 53 accept"));
        assert!(at("flush chain") < at("@owners drop"));
        assert!(at("th dport 53 accept") < at("@deny drop"));
        assert!(at("@deny drop") < at("!= @allow drop"));
        assert!(base_table(true).contains("    drop\n  }"));
        assert!(table.contains("iifname vmap @dispatch"));
    }

    /// The elements reach the kernel as `nft` shows them, and go again, in a network
    /// namespace of the test's own (needs root). The table is one an older sandboxd
    /// made (no `egress` yet): the first add upgrades it.
    #[test]
    fn elements_round_trip_through_the_kernel() {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
        let older = base_table(false);
        let older = older
            .strip_suffix(&egress_script())
            .expect("the base chains");
        apply(older).expect("the table");
        let policy = Policy {
            deny: cidrs(&["198.18.0.9", "10.0.0.0/8"]),
            allow: vec![cidrs(&["198.18.0.0/15"])],
        };
        let (net, addr) = (
            "10.213.0.4/30".parse().expect("net"),
            Ipv4Addr::new(10, 213, 0, 6),
        );
        let resolvers = [Ipv4Addr::new(192, 0, 2, 53)];
        let rules = |ifname, policy| SandboxRules {
            ifname,
            net,
            addr,
            resolvers: &resolvers,
            policy,
        };
        add_sandbox(&sandbox_elements(&rules("sbxaaaaaaaaaaaa", &policy))).expect("add");
        let other = SandboxRules {
            net: "10.213.0.8/30".parse().expect("net"),
            addr: Ipv4Addr::new(10, 213, 0, 10),
            ..rules("sbxbbbbbbbbbbbb", &policy)
        };
        add_sandbox(&sandbox_elements(&other)).expect("add another");
        let listed = || {
            let out = Command::new("nft")
                .args(["list", "table", "inet", TABLE])
                .output()
                .expect("nft");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let text = listed();
        for want in [
            "\"sbxaaaaaaaaaaaa\" . 10.213.0.6",
            "\"sbxaaaaaaaaaaaa\" . 192.0.2.53",
            "\"sbxaaaaaaaaaaaa\" . 10.0.0.0/8",
            "\"sbxaaaaaaaaaaaa\" . 198.18.0.9",
            "\"sbxaaaaaaaaaaaa\" . 198.18.0.0/15",
            "10.213.0.4/30",
            "10.213.0.8/30",
            "10.213.0.6",
            "\"sbxaaaaaaaaaaaa\" : jump egress",
        ] {
            assert!(text.contains(want), "{want} missing in {text}");
        }
        // A policy letting nothing through takes the sandbox's DNS too; opening it
        // again gives it back.
        let deny_all = Policy {
            deny: cidrs(&["0.0.0.0/0"]),
            allow: vec![],
        };
        retarget("sbxaaaaaaaaaaaa", &deny_all, &resolvers).expect("retarget to deny all");
        let text = listed();
        assert!(!text.contains("\"sbxaaaaaaaaaaaa\" . 192.0.2.53"), "{text}");
        assert!(text.contains("\"sbxbbbbbbbbbbbb\" . 192.0.2.53"), "{text}");
        retarget("sbxaaaaaaaaaaaa", &Policy::default(), &resolvers).expect("retarget");
        let text = listed();
        assert!(text.contains("\"sbxaaaaaaaaaaaa\" . 192.0.2.53"), "{text}");
        assert!(
            !text.contains("\"sbxaaaaaaaaaaaa\" . 198.18.0.0/15"),
            "{text}"
        );
        assert!(
            text.contains("\"sbxbbbbbbbbbbbb\" . 198.18.0.0/15"),
            "{text}"
        );
        remove_sandbox("sbxaaaaaaaaaaaa", Some((net, addr))).expect("remove");
        remove_sandbox("sbxaaaaaaaaaaaa", Some((net, addr)))
            .expect("a second removal finds nothing to do");
        let text = listed();
        assert!(
            !text.contains("sbxaaaaaaaaaaaa")
                && !text.contains("10.213.0.4,")
                && !text.contains("10.213.0.6 "),
            "{text}"
        );
        assert!(
            text.contains("\"sbxbbbbbbbbbbbb\" . 10.213.0.10") && text.contains("10.213.0.8"),
            "{text}"
        );
        nfset::delete_table().expect("delete the table");
        remove_sandbox("sbxbbbbbbbbbbbb", Some((net, addr))).expect("no table: nothing to remove");
        assert_eq!(
            nfset::delete_table().map_err(|e| e.raw_os_error()),
            Err(Some(libc::ENOENT))
        );
    }
}
