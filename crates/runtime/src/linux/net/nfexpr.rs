//! nftables rule expressions as the kernel takes them (`NFTA_RULE_EXPRESSIONS`), built
//! with `netlink-packet-netfilter`'s types: the few that sandboxd's shared table uses,
//! each as `nft` compiles it (`nft --debug=netlink` shows the same bytecode).

use netlink_packet_core::{DefaultNla, NLA_F_NESTED};
use netlink_packet_netfilter::nftables::{
    Bitwise, Cmp, DataAttribute, ExpressionAttribute, Expressions, Immediate, ListAttribute,
    Lookup, Meta, MetaKey, Operator, Payload, Register, Verdict, VerdictAttribute,
};

/// One expression of a rule.
pub type Expr = ListAttribute<ExpressionAttribute>;

/// `NF_DROP` and `NF_ACCEPT`, a verdict's codes.
const DROP: u32 = 0;
const ACCEPT: u32 = 1;
/// `NFT_PAYLOAD_NETWORK_HEADER`, `NFT_PAYLOAD_TRANSPORT_HEADER`.
const NETWORK_HEADER: u32 = 1;
const TRANSPORT_HEADER: u32 = 2;
/// `NFT_LOOKUP_F_INV`: the lookup matches when the key is not in the set.
const LOOKUP_INVERT: u32 = 1;
/// `NFTA_CT_DREG`, `NFTA_CT_KEY`, and `NFT_CT_STATE`.
const CT_DREG: u16 = 1;
const CT_KEY: u16 = 2;
const CT_STATE: u32 = 0;
/// `NFPROTO_IPV4`, `NFPROTO_IPV6` (one byte, as `meta nfproto` loads it).
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;
/// `IP_CT_ESTABLISHED` and `IP_CT_RELATED` as `ct state` bits.
const CT_ESTABLISHED_RELATED: u32 = 0x2 | 0x4;

fn value(bytes: &[u8]) -> DataAttribute {
    DataAttribute::Value(bytes.to_vec())
}

/// Loads `key` of the packet's metadata into `reg`.
pub fn meta(key: MetaKey, reg: Register) -> Expr {
    Expressions::Meta(vec![Meta::Key(key), Meta::DestinationRegister(reg)]).into()
}

/// Compares register 1 with `data`: equal, or with `not`, different. A name's prefix
/// (`"sbx*"`) is its bytes without the terminating zero.
pub fn cmp(not: bool, data: &[u8]) -> Expr {
    let op = if not {
        Operator::NotEqual
    } else {
        Operator::Equal
    };
    Expressions::Cmp(vec![
        Cmp::SourceRegister(Register::Reg1),
        Cmp::Op(op),
        Cmp::Data(value(data)),
    ])
    .into()
}

/// Loads `len` bytes at `offset` of the network header into `reg`.
pub fn network(offset: u32, len: u32, reg: Register) -> Expr {
    payload(NETWORK_HEADER, offset, len, reg)
}

/// Loads the transport header's destination port into register 1.
pub fn dport() -> Expr {
    payload(TRANSPORT_HEADER, 2, 2, Register::Reg1)
}

fn payload(base: u32, offset: u32, len: u32, reg: Register) -> Expr {
    Expressions::Payload(vec![
        Payload::DestinationRegister(reg),
        Payload::Base(base),
        Payload::Offset(offset),
        Payload::Len(len),
    ])
    .into()
}

/// Looks register 1 (and those after it, for a concatenated key) up in set `set`
/// (made in the same batch as `id`): a match, or with `invert` none, goes on.
pub fn lookup(set: &str, id: u32, invert: bool) -> Expr {
    let mut attrs = vec![
        Lookup::SourceRegister(Register::Reg1),
        Lookup::Set(set.into()),
        Lookup::SetId(id),
    ];
    if invert {
        attrs.push(Lookup::Flags(LOOKUP_INVERT));
    }
    Expressions::Lookup(attrs).into()
}

/// Looks register 1 up in the verdict map `map` (made in the same batch as `id`) and
/// takes the verdict it maps to.
pub fn vmap(map: &str, id: u32) -> Expr {
    Expressions::Lookup(vec![
        Lookup::SourceRegister(Register::Reg1),
        Lookup::DestinationRegister(Register::Verdict),
        Lookup::Set(map.into()),
        Lookup::SetId(id),
    ])
    .into()
}

/// Goes on only for packets of an established or related connection (`ct state
/// established,related`).
pub fn established_or_related() -> [Expr; 3] {
    let ct = Expressions::Other {
        expression_type: "ct".into(),
        attributes: vec![
            DefaultNla::new(CT_KEY, CT_STATE.to_be_bytes().to_vec()),
            DefaultNla::new(CT_DREG, u32::from(Register::Reg1).to_be_bytes().to_vec()),
        ],
    };
    let bits = Expressions::Bitwise(vec![
        Bitwise::SourceRegister(Register::Reg1),
        Bitwise::DestinationRegister(Register::Reg1),
        Bitwise::Length(4),
        Bitwise::Mask(value(&CT_ESTABLISHED_RELATED.to_ne_bytes())),
        Bitwise::Xor(value(&0u32.to_ne_bytes())),
    ]);
    [ct.into(), bits.into(), cmp(true, &0u32.to_ne_bytes())]
}

/// Masquerades the packet's source address.
pub fn masquerade() -> Expr {
    Expressions::Other {
        expression_type: "masq".into(),
        attributes: Vec::new(),
    }
    .into()
}

/// Drops the packet.
pub fn drop() -> Expr {
    verdict(DROP)
}

/// Accepts the packet.
pub fn accept() -> Expr {
    verdict(ACCEPT)
}

fn verdict(code: u32) -> Expr {
    Expressions::Immediate(vec![
        Immediate::DestinationRegister(Register::Verdict),
        Immediate::Data(DataAttribute::Verdict(vec![VerdictAttribute::Code(
            Verdict::Other(code),
        )])),
    ])
    .into()
}

/// A nested attribute of `kind` holding `inner` (for the few the crate has no type of).
pub fn nested(kind: u16, inner: &[DefaultNla]) -> DefaultNla {
    use netlink_packet_core::Emitable;
    let mut bytes = vec![0u8; inner.buffer_len()];
    inner.emit(&mut bytes);
    DefaultNla::new(kind | NLA_F_NESTED, bytes)
}
