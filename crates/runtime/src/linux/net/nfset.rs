//! Set elements of sandboxd's nftables table, programmed in-process through nfnetlink
//! with `netlink-packet-netfilter` (MIT): each change is one batch (one kernel
//! transaction, all or nothing) of NEWSETELEM / DELSETELEM messages; a set's elements
//! are read back with a GETSETELEM dump. No `nft` process, no GPL library.

use super::nfdump::{DumpedElems, DATA_VALUE};
use super::nft::TABLE;
use super::nlsock;
use netlink_packet_core::{NetlinkMessage, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP};
use netlink_packet_netfilter::nftables::{
    DataAttribute, ListAttribute, NfTablesMessage, SetElementAttribute, SetElementFlags,
    SetElementList, SetElementMessage, TableAttribute, TableMessage, Verdict, VerdictAttribute,
};
use netlink_packet_netfilter::none::ControlMessage;
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};
use netlink_sys::protocols::NETLINK_NETFILTER;
use std::io;

/// `NFNL_SUBSYS_NFTABLES`: the subsystem a batch's begin and end name.
const SUBSYS_NFTABLES: u16 = 10;

/// One element of set `set`: its key; for a concatenated interval set its (inclusive)
/// end; for a plain interval set whether it ends an interval (`end`: its key is one
/// past the interval's last address); for a verdict map, the chain it jumps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elem {
    pub set: &'static str,
    pub key: Vec<u8>,
    pub key_end: Option<Vec<u8>>,
    pub end: bool,
    pub jump: Option<&'static str>,
}

impl Elem {
    /// Whether `other` is the same element (whatever it maps to).
    pub fn same(&self, other: &Elem) -> bool {
        (self.set, &self.key, &self.key_end, self.end)
            == (other.set, &other.key, &other.key_end, other.end)
    }
}

pub(super) fn inet(inner: NfTablesMessage) -> NetlinkMessage<NetfilterMessage> {
    NetlinkMessage::from(NetfilterMessage::new(
        NetfilterHeader::new(NetfilterProtoFamily::Inet, 0, 0),
        inner,
    ))
}

pub(super) fn control(inner: ControlMessage) -> NetlinkMessage<NetfilterMessage> {
    NetlinkMessage::from(NetfilterMessage::new(
        NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, SUBSYS_NFTABLES),
        inner,
    ))
}

fn elements_of(set: &str, elems: Vec<ListAttribute<SetElementAttribute>>) -> SetElementMessage {
    SetElementMessage {
        attributes: vec![
            SetElementList::Table(TABLE.into()),
            SetElementList::Set(set.into()),
            SetElementList::Elements(elems),
        ],
    }
}

fn element(e: &Elem) -> ListAttribute<SetElementAttribute> {
    let mut attrs = vec![SetElementAttribute::Key(DataAttribute::Value(
        e.key.clone(),
    ))];
    if let Some(end) = &e.key_end {
        let value = netlink_packet_core::DefaultNla::new(DATA_VALUE, end.clone());
        attrs.push(SetElementAttribute::KeyEnd(vec![value]));
    }
    if e.end {
        attrs.push(SetElementAttribute::Flags(SetElementFlags::IntervalEnd));
    }
    if let Some(chain) = e.jump {
        attrs.push(SetElementAttribute::Data(DataAttribute::Verdict(vec![
            VerdictAttribute::Code(Verdict::Jump),
            VerdictAttribute::Chain(chain.into()),
        ])));
    }
    ListAttribute::Element(attrs)
}

/// The batch removing `del` and adding `add`, in that order, in one transaction: one
/// message per run of elements of the same set. Only the last asks for an ack: the
/// kernel reports an error of any message anyway, before that ack, and an ack for
/// every message (each of a large batch's) can overrun the socket (`ENOBUFS`).
fn batch(add: &[Elem], del: &[Elem]) -> Vec<(NetlinkMessage<NetfilterMessage>, u16)> {
    let mut msgs = vec![(control(ControlMessage::BatchBegin), 0)];
    for (elems, adding) in [(del, false), (add, true)] {
        for run in elems.chunk_by(|a, b| a.set == b.set) {
            let list = elements_of(run[0].set, run.iter().map(element).collect());
            msgs.push(match adding {
                true => (inet(NfTablesMessage::NewSetElement(list)), NLM_F_CREATE),
                false => (inet(NfTablesMessage::DeleteSetElement(list)), 0),
            });
        }
    }
    if let Some((_, flags)) = msgs.last_mut() {
        *flags |= NLM_F_ACK;
    }
    msgs.push((control(ControlMessage::BatchEnd), 0));
    msgs
}

/// Removes `del` and adds `add` in one transaction (nothing at all if either fails).
/// When the replies were lost (`ENOBUFS`), the sets are read again: the change is
/// done if every element of `add` is there and none of `del`.
pub fn commit(add: &[Elem], del: &[Elem]) -> io::Result<()> {
    commit_with(add, del, |msgs| nlsock::transact(NETLINK_NETFILTER, msgs))
}

/// [`commit`], the batch sent by `send`.
fn commit_with(
    add: &[Elem],
    del: &[Elem],
    send: impl FnOnce(Vec<(NetlinkMessage<NetfilterMessage>, u16)>) -> io::Result<()>,
) -> io::Result<()> {
    if add.is_empty() && del.is_empty() {
        return Ok(());
    }
    match send(batch(add, del)) {
        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => match in_place(add, del) {
            Ok(true) => Ok(()),
            Ok(false) => Err(e),
            Err(read) => Err(io::Error::new(
                read.kind(),
                format!("{e}; reading the sets back to learn whether it took effect: {read}"),
            )),
        },
        other => other,
    }
}

/// Whether the sets hold every element of `add` and none of `del`.
pub(super) fn in_place(add: &[Elem], del: &[Elem]) -> io::Result<bool> {
    let mut sets: Vec<&'static str> = add.iter().chain(del).map(|e| e.set).collect();
    sets.sort_unstable();
    sets.dedup();
    for set in sets {
        let now = list(set)?;
        let has = |e: &Elem| now.iter().any(|n| n.same(e));
        let added = add.iter().filter(|e| e.set == set).all(has);
        let removed = !del.iter().filter(|e| e.set == set).any(has);
        if !(added && removed) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The elements of set `set` now.
pub fn list(set: &'static str) -> io::Result<Vec<Elem>> {
    let request = inet(NfTablesMessage::GetSetElement(SetElementMessage {
        attributes: vec![
            SetElementList::Table(TABLE.into()),
            SetElementList::Set(set.into()),
        ],
    }));
    let answers: Vec<DumpedElems> = nlsock::dump(NETLINK_NETFILTER, request, NLM_F_DUMP)?;
    Ok(answers
        .into_iter()
        .flat_map(|DumpedElems(elems)| elems)
        .map(|e| Elem {
            set,
            key: e.key,
            key_end: e.key_end,
            end: e.end,
            jump: None,
        })
        .collect())
}

/// Deletes the whole table (`ENOENT`: there was none).
pub fn delete_table() -> io::Result<()> {
    let m = NfTablesMessage::DeleteTable(TableMessage {
        attributes: vec![TableAttribute::Name(TABLE.into())],
    });
    let msgs = vec![
        (control(ControlMessage::BatchBegin), 0),
        (inet(m), NLM_F_ACK),
        (control(ControlMessage::BatchEnd), 0),
    ];
    nlsock::transact(NETLINK_NETFILTER, msgs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_one_message_per_run_of_one_set_between_begin_and_end() {
        let e = |set, k: u8| Elem {
            set,
            key: vec![k; 4],
            key_end: None,
            end: false,
            jump: None,
        };
        let add = [e("nets", 1), e("nets", 2), e("owners", 3), e("nets", 4)];
        let del = [e("dns", 5)];
        let msgs = batch(&add, &del);
        assert_eq!(msgs.len(), 6, "begin, dns, nets, owners, nets, end");
        let kinds: Vec<u16> = msgs
            .iter()
            .map(|(m, _)| {
                let mut m = m.clone();
                m.finalize();
                m.header.message_type
            })
            .collect();
        // NFNL_MSG_BATCH_BEGIN/END, then (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_*SETELEM.
        assert_eq!(kinds, [16, 0x0a0e, 0x0a0c, 0x0a0c, 0x0a0c, 17]);
        let acked: Vec<bool> = msgs.iter().map(|(_, f)| f & NLM_F_ACK != 0).collect();
        assert_eq!(
            acked,
            [false, false, false, false, true, false],
            "the last asks"
        );
        assert!(msgs[2..5].iter().all(|(_, f)| f & NLM_F_CREATE != 0));
    }

    /// With an ack asked of the last message only, an error of an earlier one still
    /// fails the batch, and nothing of it is committed (in a network namespace of the
    /// test's own; needs root).
    #[test]
    fn an_error_of_any_message_fails_the_batch_and_commits_nothing() {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
        super::super::nft::apply(&super::super::nft::base_table(false)).expect("the table");
        let e = |set, key: Vec<u8>| Elem {
            set,
            key,
            key_end: None,
            end: false,
            jump: None,
        };
        let source = |i: u8| e("nat_sources", vec![10, 213, 0, i]);
        let enoent = |r: io::Result<()>| r.map_err(|e| e.raw_os_error());
        // A missing set first, good elements after it (the acked message among them).
        let add = [e("nosuchset", vec![1; 4]), source(2), source(6)];
        assert_eq!(enoent(commit(&add, &[])), Err(Some(libc::ENOENT)));
        // The acked (last) message is the bad one.
        let add = [source(2), e("nosuchset", vec![1; 4])];
        assert_eq!(enoent(commit(&add, &[])), Err(Some(libc::ENOENT)));
        // Removing an element that is not there, before a good add.
        assert_eq!(
            enoent(commit(&[source(10)], &[source(14)])),
            Err(Some(libc::ENOENT))
        );
        assert_eq!(list("nat_sources").expect("list"), Vec::new());
        commit(&[source(2), source(6)], &[]).expect("a good batch");
        assert_eq!(list("nat_sources").expect("list").len(), 2);
    }

    /// Replies lost (`ENOBUFS`): a batch the kernel committed is reported done, one it
    /// never saw is not (the sets read back; own network namespace, needs root).
    #[test]
    fn lost_replies_are_settled_by_reading_the_sets_back() {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
        super::super::nft::apply(&super::super::nft::base_table(false)).expect("the table");
        let source = |i: u8| Elem {
            set: "nat_sources",
            key: vec![10, 213, 0, i],
            key_end: None,
            end: false,
            jump: None,
        };
        commit(&[source(2), source(6)], &[]).expect("a good batch");
        let lost = || io::Error::from_raw_os_error(libc::ENOBUFS);
        let committed_then_lost = |msgs| {
            nlsock::transact(NETLINK_NETFILTER, msgs)?;
            Err(lost())
        };
        commit_with(&[source(10)], &[source(2)], committed_then_lost)
            .expect("a committed batch whose replies were lost");
        let never_sent = |_| Err(lost());
        let r = commit_with(&[source(14)], &[source(6)], never_sent);
        assert_eq!(r.map_err(|e| e.raw_os_error()), Err(Some(libc::ENOBUFS)));
        let keys: Vec<Vec<u8>> = list("nat_sources")
            .expect("list")
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(keys.contains(&source(6).key) && keys.contains(&source(10).key));
    }
}
