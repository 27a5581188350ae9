//! Plain-data network settings of a sandbox: egress-only or none, and layered egress
//! policies (allow/deny lists of IPv4 CIDRs and domain names).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// Whether a sandbox gets a network beyond its own loopback.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Outbound TCP/UDP and DNS through the host; nothing connects in.
    #[default]
    Egress,
    /// Only `lo`.
    None,
}

/// An IPv4 network, `a.b.c.d/len` (a bare address is a /32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Cidr {
    /// The network's first address (host bits cleared).
    pub fn network(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) & self.mask())
    }

    fn mask(&self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        }
    }

    /// Whether `ip` lies in this network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.network())
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network(), self.prefix)
    }
}

/// A malformed CIDR or domain in a policy (shown cut to its first 64 characters: a
/// client's error message never echoes a megabyte of it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{:?}{} is neither an IPv4 CIDR nor a domain name", shown(&self.0), cut(&self.0))]
pub struct BadRule(pub String);

/// Characters of a bad rule an error message shows.
const SHOWN_CHARS: usize = 64;

fn shown(rule: &str) -> String {
    rule.chars().take(SHOWN_CHARS).collect()
}

fn cut(rule: &str) -> &'static str {
    match rule.chars().nth(SHOWN_CHARS) {
        Some(_) => "…",
        None => "",
    }
}

impl FromStr for Cidr {
    type Err = BadRule;
    fn from_str(s: &str) -> Result<Self, BadRule> {
        let bad = || BadRule(s.to_string());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, p.parse::<u8>().map_err(|_| bad())?),
            None => (s, 32),
        };
        if prefix > 32 {
            return Err(bad());
        }
        Ok(Cidr {
            addr: addr.parse().map_err(|_| bad())?,
            prefix,
        })
    }
}

/// One entry of an allow or deny list.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum EgressRule {
    Cidr(Cidr),
    /// A lowercase domain name, matched exactly (enforced on the addresses it resolves to).
    Domain(String),
}

impl FromStr for EgressRule {
    type Err = BadRule;
    fn from_str(s: &str) -> Result<Self, BadRule> {
        if s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars()
                .all(|c| c.is_ascii_digit() || c == '.' || c == '/')
        {
            return s.parse().map(EgressRule::Cidr);
        }
        let name = s.trim_end_matches('.').to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(BadRule(s.to_string()));
        }
        Ok(EgressRule::Domain(name))
    }
}

impl TryFrom<String> for EgressRule {
    type Error = BadRule;
    fn try_from(s: String) -> Result<Self, BadRule> {
        s.parse()
    }
}

impl From<EgressRule> for String {
    fn from(r: EgressRule) -> String {
        r.to_string()
    }
}

impl fmt::Display for EgressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EgressRule::Cidr(c) => c.fmt(f),
            EgressRule::Domain(d) => f.write_str(d),
        }
    }
}

/// One layer of policy. An empty `allow` allows every destination; `deny` always wins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressPolicy {
    #[serde(default)]
    pub allow: Vec<EgressRule>,
    #[serde(default)]
    pub deny: Vec<EgressRule>,
}

/// A sandbox's network: its mode and policy layers (e.g. workspace, then sandbox). A
/// destination must pass every layer, so a later layer can only narrow earlier ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkSpec {
    #[serde(default)]
    pub mode: NetworkMode,
    #[serde(default)]
    pub layers: Vec<EgressPolicy>,
}

impl NetworkSpec {
    /// Only loopback.
    pub fn none() -> Self {
        NetworkSpec {
            mode: NetworkMode::None,
            layers: Vec::new(),
        }
    }

    /// Egress-only with the given policy layers.
    pub fn egress(layers: Vec<EgressPolicy>) -> Self {
        NetworkSpec {
            mode: NetworkMode::Egress,
            layers,
        }
    }

    /// Every domain any layer names.
    pub fn domains(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .layers
            .iter()
            .flat_map(|l| l.allow.iter().chain(&l.deny))
            .filter_map(|r| match r {
                EgressRule::Domain(d) => Some(d.clone()),
                EgressRule::Cidr(_) => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_print() {
        let r: EgressRule = "10.1.2.3/8".parse().expect("cidr");
        assert_eq!(r.to_string(), "10.0.0.0/8");
        assert_eq!(
            "192.0.2.7".parse::<EgressRule>().expect("ip").to_string(),
            "192.0.2.7/32"
        );
        assert_eq!(
            "Example.COM.".parse::<EgressRule>().expect("domain"),
            EgressRule::Domain("example.com".into())
        );
        for bad in [
            "10.0.0.0/33",
            "1.2.3",
            "a..b",
            "-x.com",
            "",
            "x y",
            "300.1.1.1",
        ] {
            assert!(bad.parse::<EgressRule>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn cidr_contains() {
        let c: Cidr = "169.254.0.0/16".parse().expect("cidr");
        assert!(c.contains(Ipv4Addr::new(169, 254, 169, 254)));
        assert!(!c.contains(Ipv4Addr::new(169, 253, 0, 1)));
        assert!("0.0.0.0/0"
            .parse::<Cidr>()
            .expect("all")
            .contains(Ipv4Addr::new(8, 8, 8, 8)));
    }

    #[test]
    fn spec_serde_and_domains() {
        let json = r#"{"layers":[{"allow":["a.test","10.0.0.0/8"]},{"deny":["b.test","a.test"]}]}"#;
        let spec: NetworkSpec = serde_json::from_str(json).expect("parse");
        assert_eq!(spec.mode, NetworkMode::Egress);
        assert_eq!(spec.domains(), ["a.test", "b.test"]);
        assert!(serde_json::from_str::<EgressPolicy>(r#"{"deny":["not a name"]}"#).is_err());
    }
}
