//! The nftables ruleset: one `inet` table of sandboxd's own with the shared chains, and
//! a chain plus address sets per sandbox; each change applied as one transaction,
//! in-process through libnftables (see `libnft`; `nft -f -` only on a host without it).

use crate::{Cidr, RuntimeError};
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// The table every sandboxd on this host shares.
pub const TABLE: &str = "sandboxd";
/// Host-side interface names of sandboxes start with this.
pub const IF_PREFIX: &str = "sbx";

/// Destinations no sandbox may reach: "this" network, loopback, link-local (metadata),
/// multicast, reserved and broadcast. Sandbox networks are in `nets`, one element each:
/// an `auto-merge` set joins adjacent /30s into ranges, from which nft 1.0.6 cannot
/// delete one again (every removal then failed and fell back to an nft run per command).
const BLOCKED: &str = "0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/3";

/// The shared table. With `guard`, forwarding that involves no sandbox is dropped (set
/// when sandboxd itself turned `ip_forward` on, so the host does not become a router).
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
",
        guard = if guard { "    drop\n" } else { "" }
    )
}

/// What one sandbox's chain enforces, with domains already resolved.
pub struct SandboxRules<'a> {
    /// Short id naming the chain, sets and interface.
    pub key: &'a str,
    pub ifname: &'a str,
    pub net: Cidr,
    pub addr: Ipv4Addr,
    pub resolvers: &'a [Ipv4Addr],
    /// Union of every layer's deny list.
    pub deny: Vec<Cidr>,
    /// One entry per layer that has an allow list (possibly empty after resolution).
    pub allow: Vec<Vec<Cidr>>,
}

fn elements(cidrs: &[Cidr]) -> String {
    cidrs
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Commands adding a sandbox's chain, sets, dispatch entry and NAT source.
pub fn add_sandbox(r: &SandboxRules) -> String {
    let (t, k) = (TABLE, r.key);
    // `nets` is made here too, for a table an older sandboxd made without it.
    let mut s = format!(
        "add set inet {t} nets {{ type ipv4_addr; flags interval; }}\nadd chain inet {t} sb_{k}\n"
    );
    s += &policy(r);
    s += &format!("add element inet {t} nets {{ {} }}\n", r.net);
    s += &format!("add element inet {t} nat_sources {{ {} }}\n", r.addr);
    s += &format!(
        "add element inet {t} dispatch {{ \"{}\" : jump sb_{k} }}\n",
        r.ifname
    );
    s
}

/// Commands giving the existing chain of a sandbox made with no policy (a spare's or a
/// warm entry's) the policy of `r` instead: its rules rewritten and its sets filled, in
/// the same transaction as everything else of one change.
pub fn retarget(r: &SandboxRules) -> String {
    let (t, k) = (TABLE, r.key);
    let mut s = format!("flush chain inet {t} sb_{k}\nflush set inet {t} sb_{k}_deny\n");
    s += &policy(r);
    s
}

/// The sandbox's sets and the rules of its chain (which exists and is empty).
fn policy(r: &SandboxRules) -> String {
    let (t, k) = (TABLE, r.key);
    let mut s =
        format!("add set inet {t} sb_{k}_deny {{ type ipv4_addr; flags interval; auto-merge; }}\n");
    if !r.deny.is_empty() {
        s += &format!(
            "add element inet {t} sb_{k}_deny {{ {} }}\n",
            elements(&r.deny)
        );
    }
    s += &format!("add rule inet {t} sb_{k} ip saddr != {} drop\n", r.addr);
    s += &format!("add rule inet {t} sb_{k} meta nfproto ipv6 drop\n");
    s += &format!("add rule inet {t} sb_{k} ip daddr @blocked drop\n");
    s += &format!("add rule inet {t} sb_{k} ip daddr @nets drop\n");
    if !r.resolvers.is_empty() {
        let dns: Vec<String> = r.resolvers.iter().map(|a| a.to_string()).collect();
        s += &format!("add rule inet {t} sb_{k} ip daddr {{ {} }} meta l4proto {{ tcp, udp }} th dport 53 accept\n", dns.join(", "));
    }
    s += &format!("add rule inet {t} sb_{k} ip daddr @sb_{k}_deny drop\n");
    for (i, allow) in r.allow.iter().enumerate() {
        s += &format!(
            "add set inet {t} sb_{k}_allow{i} {{ type ipv4_addr; flags interval; auto-merge; }}\n"
        );
        if !allow.is_empty() {
            s += &format!(
                "add element inet {t} sb_{k}_allow{i} {{ {} }}\n",
                elements(allow)
            );
        }
        s += &format!("add rule inet {t} sb_{k} ip daddr != @sb_{k}_allow{i} drop\n");
    }
    s += &format!("add rule inet {t} sb_{k} accept\n");
    s
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

/// Removes a sandbox's entries in one transaction; if some are gone already (a crash
/// mid-way, or a second removal), one command at a time, ignoring the missing ones.
pub fn remove_sandbox(key: &str, ifname: &str, net: Option<(Cidr, Ipv4Addr)>, allow_layers: usize) {
    let cmds = remove_commands(key, ifname, net, allow_layers);
    if apply(&cmds.join("\n")).is_ok() {
        return;
    }
    for cmd in cmds {
        let _ = apply(&cmd);
    }
}

/// The commands removing a sandbox's entries, references before what they reference.
fn remove_commands(
    key: &str,
    ifname: &str,
    net: Option<(Cidr, Ipv4Addr)>,
    allow_layers: usize,
) -> Vec<String> {
    let t = TABLE;
    let mut cmds = vec![format!(
        "delete element inet {t} dispatch {{ \"{ifname}\" }}"
    )];
    if let Some((net, addr)) = net {
        cmds.push(format!("delete element inet {t} nets {{ {net} }}"));
        cmds.push(format!("delete element inet {t} nat_sources {{ {addr} }}"));
    }
    cmds.push(format!("delete chain inet {t} sb_{key}"));
    cmds.push(format!("delete set inet {t} sb_{key}_deny"));
    cmds.extend((0..allow_layers).map(|i| format!("delete set inet {t} sb_{key}_allow{i}")));
    cmds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_chain_blocks_before_it_allows() {
        let rules = SandboxRules {
            key: "abc",
            ifname: "sbxabc",
            net: "10.213.0.4/30".parse().expect("net"),
            addr: Ipv4Addr::new(10, 213, 0, 6),
            resolvers: &[Ipv4Addr::new(192, 0, 2, 53)],
            deny: vec!["192.0.2.9".parse().expect("deny")],
            allow: vec![vec![], vec!["198.18.0.0/15".parse().expect("allow")]],
        };
        let s = add_sandbox(&rules);
        let at = |needle: &str| {
            s.find(needle)
                .unwrap_or_else(|| panic!("{needle:?} missing in {s}"))
        };
        assert!(at("saddr != 10.213.0.6 drop") < at("@blocked drop"));
        assert!(at("@blocked drop") < at("th dport 53 accept"));
        assert!(at("th dport 53 accept") < at("@sb_abc_deny drop"));
        assert!(at("@sb_abc_deny drop") < at("!= @sb_abc_allow0 drop"));
        assert!(at("!= @sb_abc_allow1 drop") < at("sb_abc accept"));
        assert!(
            !s.contains("add element inet sandboxd sb_abc_allow0"),
            "an empty allow set stays empty (denies all)"
        );
        assert!(s.contains("dispatch { \"sbxabc\" : jump sb_abc }"));
        assert!(s.contains("nets { 10.213.0.4/30 }"));
        assert!(at("@blocked drop") < at("@nets drop"));
        assert!(at("@nets drop") < at("th dport 53 accept"));
        assert!(
            base_table(false).contains("169.254.0.0/16")
                && base_table(false).contains("127.0.0.0/8")
        );
        assert!(base_table(true).contains("    drop\n  }"));
    }
}
