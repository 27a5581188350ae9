//! Forgetting a sandbox's connections when its address goes: the host's connection
//! tracking keeps a flow's entry (its NAT mapping included) for up to days after the
//! sandbox that opened it is gone, and the next sandbox given that address would receive
//! whatever the far end still sends to it: another tenant's replies. So the entries
//! whose original source is the address are deleted (ctnetlink: a dump, then a delete
//! per entry) when a network is torn down or parked for the next sandbox. The dump reads
//! the host's whole IPv4 table: the kernel's own filter (`CTA_FILTER` with the source
//! address) answered `EINVAL` here when tried, so filtering is done on this side.
//!
//! That dump walks every bucket of the host's table (262144 here) under its locks:
//! about 12 ms of system time each, whatever the table holds. So a link whose host end
//! never received a packet, read once nothing in its sandbox runs any more, skips it
//! ([`may_have_flows`]): no flow of that address ever reached the host.

use super::nlsock;
use netlink_packet_core::{NetlinkMessage, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_netfilter::conntrack::{ConntrackAttribute, ConntrackMessage, IPTuple, Tuple};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use netlink_sys::protocols::NETLINK_NETFILTER;
use std::io;
use std::net::{IpAddr, Ipv4Addr};

fn ipv4(message: ConntrackMessage) -> NetlinkMessage<NetfilterMessage> {
    NetlinkMessage::from(NetfilterMessage::new(
        NetfilterHeader::new(NetfilterProtoFamily::IPv4, 0, 0),
        message,
    ))
}

/// The original-direction tuple of a dumped entry, if its source is `addr`.
fn from_addr(message: NetfilterMessage, addr: Ipv4Addr) -> Option<Vec<Tuple>> {
    // A dump answers each entry as a NEW message (as `conntrack -L` reads it).
    let attrs = match message.inner {
        NetfilterMessageInner::Conntrack(ConntrackMessage::New(attrs))
        | NetfilterMessageInner::Conntrack(ConntrackMessage::Get(attrs)) => attrs,
        _ => return None,
    };
    attrs.into_iter().find_map(|attr| match attr {
        ConntrackAttribute::CtaTupleOrig(tuple) => {
            let source = tuple.iter().any(|t| match t {
                Tuple::Ip(ips) => ips.contains(&IPTuple::SourceAddress(IpAddr::V4(addr))),
                _ => false,
            });
            source.then_some(tuple)
        }
        _ => None,
    })
}

/// Whether the sandbox whose link's host end is `ifname` may have left tracked flows:
/// false only when `emptied` (no process of the sandbox runs any more, so none can send
/// after this read) and the host end has received no packet at all. Its `eth0` has
/// IPv6 off (see `inner`), so it sends nothing a process did not; anything unread (the
/// link gone, a counter that cannot be read) counts as used. Read before the link is
/// deleted.
pub fn may_have_flows(ifname: &str, emptied: bool) -> bool {
    if !emptied {
        return true;
    }
    let path = format!("/sys/class/net/{ifname}/statistics/rx_packets");
    let received = std::fs::read_to_string(path)
        .ok()
        .and_then(|n| n.trim().parse::<u64>().ok());
    received != Some(0)
}

/// Deletes the tracked connections whose original source is `addr`; how many were found.
/// An entry that expires meanwhile is no error (the deletes ask for no answer).
pub fn forget(addr: Ipv4Addr) -> io::Result<usize> {
    let entries = nlsock::dump(
        NETLINK_NETFILTER,
        ipv4(ConntrackMessage::Get(Vec::new())),
        NLM_F_DUMP,
    )?;
    let deletes: Vec<_> = entries
        .into_iter()
        .filter_map(|entry| from_addr(entry, addr))
        .map(|tuple| {
            let delete = ConntrackMessage::Delete(vec![ConntrackAttribute::CtaTupleOrig(tuple)]);
            (ipv4(delete), NLM_F_REQUEST)
        })
        .collect();
    let found = deletes.len();
    if found > 0 {
        nlsock::transact(NETLINK_NETFILTER, deletes)?;
    }
    Ok(found)
}

/// [`forget`], logging a failure: a teardown goes on without it.
pub fn forget_logged(addr: Ipv4Addr) {
    match forget(addr) {
        Ok(0) => {}
        Ok(n) => tracing::debug!(%addr, entries = n, "forgot a released address's connections"),
        Err(e) => {
            tracing::warn!(%addr, error = %e, "cannot forget a released address's connections")
        }
    }
}
