//! The answers of a set element dump (GETSETELEM), parsed here rather than by
//! `netlink-packet-netfilter`: its parser formats the whole element list as text
//! (`{:?}` of its bytes) for every element it reads, an error context made whether or
//! not there is an error. A destroy reads eight sets, so reading them cost time
//! quadratic in the sandboxes on the host: 16% of a server's CPU in a burst of creates
//! and destroys, measured with `perf`. Only what [`super::nfset::Elem`] keeps is read:
//! each element's key, its key end and its interval-end flag.

use netlink_packet_core::{DecodeError, NetlinkDeserializable, NetlinkHeader, NlasIterator};

/// `NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWSETELEM`: a dumped set's elements.
const NEW_SET_ELEMENT: u16 = 10 << 8 | 12;
/// `struct nfgenmsg`, before the attributes.
const NFGENMSG_LEN: usize = 4;
/// `NFTA_SET_ELEM_LIST_ELEMENTS`.
const LIST_ELEMENTS: u16 = 3;
/// `NFTA_LIST_ELEM`.
const LIST_ELEM: u16 = 1;
/// `NFTA_SET_ELEM_KEY`, `NFTA_SET_ELEM_FLAGS`, `NFTA_SET_ELEM_KEY_END`.
const ELEM_KEY: u16 = 1;
const ELEM_FLAGS: u16 = 3;
const ELEM_KEY_END: u16 = 10;
/// `NFTA_DATA_VALUE`, the attribute holding a key's bytes.
pub(super) const DATA_VALUE: u16 = 1;
/// `NFT_SET_ELEM_INTERVAL_END`.
const INTERVAL_END: u32 = 1;

/// One dumped element: its key, its key end (concatenated interval sets) and whether
/// it ends an interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedElem {
    pub key: Vec<u8>,
    pub key_end: Option<Vec<u8>>,
    pub end: bool,
}

/// The elements one dump message holds (none for a message of another kind).
#[derive(Debug, Default)]
pub struct DumpedElems(pub Vec<DumpedElem>);

impl NetlinkDeserializable for DumpedElems {
    type Error = DecodeError;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, DecodeError> {
        if header.message_type != NEW_SET_ELEMENT {
            return Ok(DumpedElems::default());
        }
        let attrs = payload
            .get(NFGENMSG_LEN..)
            .ok_or_else(|| DecodeError::from("a set element message without its header"))?;
        let mut out = Vec::new();
        for list in NlasIterator::new(attrs) {
            let list = list?;
            if list.kind() != LIST_ELEMENTS {
                continue;
            }
            for elem in NlasIterator::new(list.value()) {
                let elem = elem?;
                if elem.kind() == LIST_ELEM {
                    out.extend(element(elem.value())?);
                }
            }
        }
        Ok(DumpedElems(out))
    }
}

/// An element's attributes; `None` when it has no key.
fn element(attrs: &[u8]) -> Result<Option<DumpedElem>, DecodeError> {
    let (mut key, mut key_end, mut end) = (None, None, false);
    for attr in NlasIterator::new(attrs) {
        let attr = attr?;
        match attr.kind() {
            ELEM_KEY => key = data_value(attr.value())?,
            ELEM_KEY_END => key_end = data_value(attr.value())?,
            ELEM_FLAGS => {
                let flags: [u8; 4] = attr
                    .value()
                    .try_into()
                    .map_err(|_| DecodeError::from("set element flags of a wrong size"))?;
                end = u32::from_be_bytes(flags) & INTERVAL_END != 0;
            }
            _ => {}
        }
    }
    Ok(key.map(|key| DumpedElem { key, key_end, end }))
}

/// The bytes of the `NFTA_DATA_VALUE` nested in a key attribute.
fn data_value(nested: &[u8]) -> Result<Option<Vec<u8>>, DecodeError> {
    for attr in NlasIterator::new(nested) {
        let attr = attr?;
        if attr.kind() == DATA_VALUE {
            return Ok(Some(attr.value().to_vec()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
    use netlink_packet_netfilter::nftables::{
        DataAttribute, ListAttribute, NfTablesMessage, SetElementAttribute, SetElementFlags,
        SetElementList, SetElementMessage,
    };
    use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};

    /// What the kernel sends for a dump, made with the crate's own types: the parse
    /// here reads the same elements the crate's parser does, in order.
    #[test]
    fn a_dump_message_reads_as_the_crates_own_parser_reads_it() {
        let elem = |key: &[u8], key_end: Option<&[u8]>, end: bool| {
            let mut attrs = vec![SetElementAttribute::Key(DataAttribute::Value(key.to_vec()))];
            if let Some(k) = key_end {
                attrs.push(SetElementAttribute::KeyEnd(vec![
                    netlink_packet_core::DefaultNla::new(DATA_VALUE, k.to_vec()),
                ]));
            }
            if end {
                attrs.push(SetElementAttribute::Flags(SetElementFlags::IntervalEnd));
            }
            ListAttribute::Element(attrs)
        };
        let elems = vec![
            elem(b"sbx0123456789ab\0\x0a\xd5\0\x02", None, false),
            elem(&[10, 213, 0, 0], None, false),
            elem(&[10, 213, 0, 4], None, true),
            elem(
                b"ifname-key\0\0\0\0\0\0\xc0\0\x02\0",
                Some(b"ifname-key\0\0\0\0\0\0\xc0\0\x02\xff"),
                false,
            ),
        ];
        let mut msg = NetlinkMessage::from(NetfilterMessage::new(
            NetfilterHeader::new(NetfilterProtoFamily::Inet, 0, 0),
            NfTablesMessage::NewSetElement(SetElementMessage {
                attributes: vec![
                    SetElementList::Table("sandboxd".into()),
                    SetElementList::Set("owners".into()),
                    SetElementList::Elements(elems),
                ],
            }),
        ));
        msg.finalize();
        let mut bytes = vec![0; msg.buffer_len()];
        msg.serialize(&mut bytes);

        let ours = NetlinkMessage::<DumpedElems>::deserialize(&bytes).expect("ours");
        let NetlinkPayload::InnerMessage(DumpedElems(ours)) = ours.payload else {
            panic!("not an inner message");
        };
        let theirs = NetlinkMessage::<NetfilterMessage>::deserialize(&bytes).expect("theirs");
        let NetlinkPayload::InnerMessage(theirs) = theirs.payload else {
            panic!("not an inner message");
        };
        let netlink_packet_netfilter::NetfilterMessageInner::NfTables(
            NfTablesMessage::NewSetElement(theirs),
        ) = theirs.inner
        else {
            panic!("not a set element message");
        };
        let mut expected = Vec::new();
        for attr in theirs.attributes {
            let SetElementList::Elements(elems) = attr else {
                continue;
            };
            for elem in elems {
                let ListAttribute::Element(attrs) = elem else {
                    continue;
                };
                let mut e = DumpedElem {
                    key: Vec::new(),
                    key_end: None,
                    end: false,
                };
                for a in attrs {
                    match a {
                        SetElementAttribute::Key(DataAttribute::Value(k)) => e.key = k,
                        SetElementAttribute::KeyEnd(nlas) => {
                            use netlink_packet_core::Nla;
                            let n = &nlas[0];
                            let mut v = vec![0; n.value_len()];
                            n.emit_value(&mut v);
                            e.key_end = Some(v);
                        }
                        SetElementAttribute::Flags(f) => {
                            e.end = f.contains(SetElementFlags::IntervalEnd)
                        }
                        _ => {}
                    }
                }
                expected.push(e);
            }
        }
        assert_eq!(ours.len(), 4);
        assert_eq!(ours, expected);
        assert!(ours[2].end && !ours[1].end);
        assert!(ours[3].key_end.is_some() && ours[0].key_end.is_none());
    }

    /// A message of another kind (the dump's end, an error) holds no elements.
    #[test]
    fn other_messages_hold_no_elements() {
        let header = NetlinkHeader::default();
        let none = DumpedElems::deserialize(&header, &[]).expect("another kind");
        assert!(none.0.is_empty());
    }
}
