//! The shared table made in-process, as one nfnetlink batch (one kernel transaction):
//! the table a crash left goes and [`super::nft::base_table`]'s sets, chains and rules
//! take its place, or nothing changes. No `nft` process (~30 ms of a first start's
//! path) and no GPL library. The batch is what `nft -f` sends for that script (its
//! sets' user data included, so `nft list` shows the same table); a test lists both
//! with `nft` and compares them.

use super::nfexpr::{self as x, Expr, NFPROTO_IPV4, NFPROTO_IPV6};
use super::nft::{ranges, TABLE};
use super::nlsock;
use netlink_packet_core::{DefaultNla, NetlinkMessage, NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, DataAttribute, Hook, HookNumber, InetHookNumber, ListAttribute,
    MetaKey, NfTablesMessage, Register, RuleAttribute, RuleMessage, SetAttribute, SetDescription,
    SetElementAttribute, SetElementList, SetElementMessage, SetFlags, SetMessage, TableAttribute,
    TableFlags, TableMessage,
};
use netlink_packet_netfilter::NetfilterMessage;
use netlink_sys::protocols::NETLINK_NETFILTER;
use std::io;

/// nftables' data types (`TYPE_IPADDR`, `TYPE_IFNAME`, `TYPE_INET_PROTOCOL`,
/// `TYPE_VERDICT`); a concatenation's type is its parts' shifted by 6 bits each.
const IPV4_ADDR: u32 = 7;
const IFNAME: u32 = 41;
const INET_PROTO: u32 = 12;
const VERDICT: u32 = 0xffff_ff00;
const IFNAME_IPV4: u32 = IFNAME << 6 | IPV4_ADDR;
/// `NFT_SET_CONCAT` (the crate names only the older flags).
const CONCAT: u32 = 0x80;
/// `NFTA_SET_DESC_CONCAT`'s parts: `NFTA_LIST_ELEM` holding `NFTA_SET_FIELD_LEN`.
const LIST_ELEM: u16 = 1;
const FIELD_LEN: u16 = 1;
/// `NFTNL_UDATA_SET_ELEM_FLAGS` = `NFTNL_SET_ELEM_F_INTERVAL_OPEN`: an interval that
/// runs to the end of the address space (it has no end element).
const OPEN_INTERVAL: &[u8] = &[1, 4, 1, 0, 0, 0];
/// `priority filter - 5` and `priority srcnat`.
const FILTER_MINUS_5: i32 = -5;
const SRCNAT: i32 = 100;
/// `NF_ACCEPT`, a base chain's policy.
const POLICY_ACCEPT: u32 = 1;
/// Interfaces of sandboxes: `"sbx*"`, the prefix without its zero.
const PREFIX: &[u8] = super::nft::IF_PREFIX.as_bytes();

/// One set of the table. `udata` is the user data `nft` stores with it (its key's and
/// data's byte order, `auto-merge`, how a concatenation prints), copied from what
/// `nft --debug=mnl -f` sends for the script.
struct SetDef {
    name: &'static str,
    id: u32,
    flags: u32,
    key: (u32, u32),
    /// A verdict map.
    map: bool,
    /// A concatenation's parts' lengths (for an interval set of one).
    parts: &'static [u32],
    udata: &'static [u8],
}

const BIG_ENDIAN: &[u8] = &[0, 4, 2, 0, 0, 0];
const BY_IFNAME_ADDR: &[u8] = &[0, 4, 0, 0, 0, 0, 3, 8, 0, 4, 13, 0, 0, 0, 1, 0];
const INTERVAL: u32 = SetFlags::Interval.bits();

const SETS: [SetDef; 9] = {
    const fn set(name: &'static str, id: u32, flags: u32, key: (u32, u32)) -> SetDef {
        SetDef {
            name,
            id,
            flags,
            key,
            map: false,
            parts: &[],
            udata: BIG_ENDIAN,
        }
    }
    const fn by_ifname(name: &'static str, id: u32, interval: bool) -> SetDef {
        SetDef {
            flags: if interval { INTERVAL | CONCAT } else { 0 },
            parts: if interval { &[16, 4] } else { &[] },
            udata: BY_IFNAME_ADDR,
            ..set(name, id, 0, (IFNAME_IPV4, 20))
        }
    }
    [
        SetDef {
            udata: &[0, 4, 2, 0, 0, 0, 2, 4, 1, 0, 0, 0],
            ..set("blocked", 1, INTERVAL, (IPV4_ADDR, 4))
        },
        set("nets", 2, INTERVAL, (IPV4_ADDR, 4)),
        set("nat_sources", 3, 0, (IPV4_ADDR, 4)),
        SetDef {
            map: true,
            udata: &[0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 6, 4, 0, 0, 0, 0],
            ..set("dispatch", 4, SetFlags::Map.bits(), (IFNAME, 16))
        },
        by_ifname("owners", 5, false),
        by_ifname("dns", 6, false),
        by_ifname("deny", 7, true),
        SetDef {
            udata: &[0, 4, 1, 0, 0, 0],
            ..set("restricted", 8, 0, (IFNAME, 16))
        },
        by_ifname("allow", 9, true),
    ]
};

/// The anonymous set `{ tcp, udp }` of the DNS rule (`nft` names it `__set%d`; the
/// kernel gives it the first free number).
const L4: SetDef = SetDef {
    name: "__set%d",
    id: 10,
    flags: SetFlags::Anonymous.bits() | SetFlags::Constant.bits(),
    key: (INET_PROTO, 1),
    map: false,
    parts: &[],
    udata: &[
        0, 4, 1, 0, 0, 0, 3, 14, 0, 4, 9, 0, 0, 0, 1, 6, 0, 4, 16, 0, 0, 0,
    ],
};

fn id_of(name: &str) -> u32 {
    SETS.iter().find(|s| s.name == name).map_or(0, |s| s.id)
}

fn set_message(s: &SetDef) -> SetMessage {
    let mut attributes = vec![
        SetAttribute::Table(TABLE.into()),
        SetAttribute::Name(s.name.into()),
        SetAttribute::Flags(SetFlags::from_bits_retain(s.flags)),
        SetAttribute::KeyType(s.key.0),
        SetAttribute::KeyLen(s.key.1),
    ];
    if s.map {
        attributes.extend([SetAttribute::DataType(VERDICT), SetAttribute::DataLen(0)]);
    }
    attributes.push(SetAttribute::Id(s.id));
    if !s.parts.is_empty() {
        let parts: Vec<DefaultNla> = s
            .parts
            .iter()
            .map(|len| {
                x::nested(
                    LIST_ELEM,
                    &[DefaultNla::new(FIELD_LEN, len.to_be_bytes().to_vec())],
                )
            })
            .collect();
        attributes.push(SetAttribute::Description(vec![SetDescription::Concat(
            parts,
        )]));
    }
    if s.name == L4.name {
        attributes.push(SetAttribute::Description(vec![SetDescription::Size(2)]));
    }
    attributes.push(SetAttribute::UserData(s.udata.to_vec()));
    SetMessage { attributes }
}

fn key(bytes: &[u8]) -> Vec<SetElementAttribute> {
    vec![SetElementAttribute::Key(DataAttribute::Value(
        bytes.to_vec(),
    ))]
}

/// `blocked`'s elements: each range's start, and one past its end flagged as an end
/// (a range reaching 255.255.255.255 has none, and says so in its user data).
fn blocked_elements() -> Vec<ListAttribute<SetElementAttribute>> {
    let mut out = Vec::new();
    for (start, end) in ranges(&super::nft::blocked()) {
        let mut first = key(&start.to_be_bytes());
        match end.checked_add(1) {
            Some(past) => {
                out.push(ListAttribute::Element(first));
                let mut last = key(&past.to_be_bytes());
                last.push(SetElementAttribute::Flags(
                    netlink_packet_netfilter::nftables::SetElementFlags::IntervalEnd,
                ));
                out.push(ListAttribute::Element(last));
            }
            None => {
                first.push(SetElementAttribute::UserData(OPEN_INTERVAL.to_vec()));
                out.push(ListAttribute::Element(first));
            }
        }
    }
    out
}

fn elements(set: &SetDef, elements: Vec<ListAttribute<SetElementAttribute>>) -> SetElementMessage {
    SetElementMessage {
        attributes: vec![
            SetElementList::Table(TABLE.into()),
            SetElementList::Set(set.name.into()),
            SetElementList::SetId(set.id),
            SetElementList::Elements(elements),
        ],
    }
}

/// A base chain: `type` (`filter` or `nat`) hooked at `hook` with `priority`, policy
/// accept.
fn base_chain(name: &str, kind: &str, hook: InetHookNumber, priority: i32) -> ChainMessage {
    ChainMessage {
        attributes: vec![
            ChainAttribute::Table(TABLE.into()),
            ChainAttribute::Name(name.into()),
            ChainAttribute::Type(kind.into()),
            ChainAttribute::Policy(POLICY_ACCEPT),
            ChainAttribute::Hook(vec![
                Hook::Number(HookNumber::Inet(hook)),
                Hook::Priority(priority as u32),
            ]),
        ],
    }
}

fn rule(chain: &str, exprs: Vec<Expr>) -> RuleMessage {
    RuleMessage {
        attributes: vec![
            RuleAttribute::Table(TABLE.into()),
            RuleAttribute::Chain(chain.into()),
            RuleAttribute::Expressions(exprs),
        ],
    }
}

/// `iifname "sbx*"` (`oif`: `oifname`; `not`: `!=`).
fn sandbox_if(oif: bool, not: bool) -> [Expr; 2] {
    let key = if oif {
        MetaKey::Oifname
    } else {
        MetaKey::Iifname
    };
    [x::meta(key, Register::Reg1), x::cmp(not, PREFIX)]
}

fn ipv4() -> [Expr; 2] {
    [
        x::meta(MetaKey::Nfproto, Register::Reg1),
        x::cmp(false, &[NFPROTO_IPV4]),
    ]
}

/// `iifname . ip <saddr or daddr>` into registers 1 and 2, for a concatenated lookup.
fn ifname_and(addr_offset: u32) -> Vec<Expr> {
    let mut e = ipv4().to_vec();
    e.push(x::meta(MetaKey::Iifname, Register::Reg1));
    e.push(x::network(addr_offset, 4, Register::Reg2));
    e
}

const SADDR: u32 = 12;
const DADDR: u32 = 16;

/// The rules of each chain, in order (see [`super::nft::base_table`] and
/// [`super::nft::egress_script`] for them as `nft` reads them).
fn rules(guard: bool) -> Vec<RuleMessage> {
    let cat = |parts: &[&[Expr]]| parts.concat();
    let established = x::established_or_related();
    let mut forward = vec![
        cat(&[
            &sandbox_if(false, false),
            &[
                x::meta(MetaKey::Iifname, Register::Reg1),
                x::vmap("dispatch", id_of("dispatch")),
            ],
        ]),
        cat(&[&sandbox_if(false, false), &[x::drop()]]),
        cat(&[&sandbox_if(true, false), &established, &[x::accept()]]),
        cat(&[&sandbox_if(true, false), &[x::drop()]]),
    ];
    if guard {
        forward.push(vec![x::drop()]);
    }
    let input = vec![cat(&[&sandbox_if(false, false), &[x::drop()]])];
    let output = vec![
        cat(&[&sandbox_if(true, false), &established, &[x::accept()]]),
        cat(&[&sandbox_if(true, false), &[x::drop()]]),
    ];
    let postrouting = vec![cat(&[
        &sandbox_if(true, true),
        &ipv4(),
        &[
            x::network(SADDR, 4, Register::Reg1),
            x::lookup("nat_sources", id_of("nat_sources"), false),
            x::masquerade(),
        ],
    ])];
    let in_set = |set: &str, offset, invert| {
        let mut e = ifname_and(offset);
        e.push(x::lookup(set, id_of(set), invert));
        e
    };
    let daddr_in = |set: &str| {
        cat(&[
            &ipv4(),
            &[
                x::network(DADDR, 4, Register::Reg1),
                x::lookup(set, id_of(set), false),
                x::drop(),
            ],
        ])
    };
    let egress = vec![
        cat(&[&in_set("owners", SADDR, true), &[x::drop()]]),
        vec![
            x::meta(MetaKey::Nfproto, Register::Reg1),
            x::cmp(false, &[NFPROTO_IPV6]),
            x::drop(),
        ],
        daddr_in("blocked"),
        daddr_in("nets"),
        cat(&[
            &in_set("dns", DADDR, false),
            &[
                x::meta(MetaKey::L4Proto, Register::Reg1),
                x::lookup(L4.name, L4.id, false),
                x::dport(),
                x::cmp(false, &53u16.to_be_bytes()),
                x::accept(),
            ],
        ]),
        cat(&[&in_set("deny", DADDR, false), &[x::drop()]]),
        cat(&[
            &[
                x::meta(MetaKey::Iifname, Register::Reg1),
                x::lookup("restricted", id_of("restricted"), false),
            ],
            &in_set("allow", DADDR, true),
            &[x::drop()],
        ]),
        vec![x::accept()],
    ];
    [
        ("forward", forward),
        ("input", input),
        ("output", output),
        ("postrouting", postrouting),
        ("egress", egress),
    ]
    .into_iter()
    .flat_map(|(chain, rules)| rules.into_iter().map(move |r| rule(chain, r)))
    .collect()
}

fn table() -> TableMessage {
    TableMessage {
        attributes: vec![
            TableAttribute::Name(TABLE.into()),
            TableAttribute::Flags(TableFlags::empty()),
        ],
    }
}

/// The batch: the table added and deleted (so whatever a crash left goes, and a host
/// without one has nothing to fail on), then made whole.
fn batch(guard: bool) -> Vec<(NetlinkMessage<NetfilterMessage>, u16)> {
    use super::nfset::{control, inet};
    use netlink_packet_netfilter::none::ControlMessage;
    let mut msgs = vec![
        (control(ControlMessage::BatchBegin), 0),
        (inet(NfTablesMessage::NewTable(table())), NLM_F_CREATE),
        (inet(NfTablesMessage::DeleteTable(table())), 0),
        (inet(NfTablesMessage::NewTable(table())), NLM_F_CREATE),
    ];
    for set in SETS.iter().chain([&L4]) {
        msgs.push((
            inet(NfTablesMessage::NewSet(set_message(set))),
            NLM_F_CREATE,
        ));
    }
    let blocked = &SETS[0];
    let l4 = vec![
        ListAttribute::Element(key(&[libc::IPPROTO_TCP as u8])),
        ListAttribute::Element(key(&[libc::IPPROTO_UDP as u8])),
    ];
    for (set, elems) in [(blocked, blocked_elements()), (&L4, l4)] {
        msgs.push((
            inet(NfTablesMessage::NewSetElement(elements(set, elems))),
            NLM_F_CREATE,
        ));
    }
    for chain in [
        base_chain("forward", "filter", InetHookNumber::Forward, FILTER_MINUS_5),
        base_chain("input", "filter", InetHookNumber::LocalIn, FILTER_MINUS_5),
        base_chain("output", "filter", InetHookNumber::LocalOut, FILTER_MINUS_5),
        base_chain("postrouting", "nat", InetHookNumber::PostRouting, SRCNAT),
        ChainMessage {
            attributes: vec![
                ChainAttribute::Table(TABLE.into()),
                ChainAttribute::Name("egress".into()),
            ],
        },
    ] {
        msgs.push((inet(NfTablesMessage::NewChain(chain)), NLM_F_CREATE));
    }
    for r in rules(guard) {
        msgs.push((
            inet(NfTablesMessage::NewRule(r)),
            NLM_F_CREATE | NLM_F_APPEND,
        ));
    }
    if let Some((_, flags)) = msgs.last_mut() {
        *flags |= NLM_F_ACK;
    }
    msgs.push((control(ControlMessage::BatchEnd), 0));
    msgs
}

/// Makes the shared table afresh (see [`super::nft::base_table`]; `guard`: forwarding
/// that involves no sandbox is dropped), replacing one of that name, in one transaction.
pub fn make(guard: bool) -> io::Result<()> {
    nlsock::transact(NETLINK_NETFILTER, batch(guard))
}

#[cfg(test)]
#[path = "nftable_tests.rs"]
mod tests;
