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
//! ([`link_received_nothing`]): no flow of that address ever reached the host. Its
//! sandbox's `eth0` has IPv6 off (see `inner`), so it sends nothing a process did not.

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

/// Whether the host end `ifname` of a sandbox's link has received no packet at all
/// (false when its counter cannot be read: the link gone, say). Meaningful only once no
/// process of the sandbox is left to send one (see `LinuxRuntime::destroy`). Read from
/// the calling thread's namespace's `net/dev` (a `/sys` mounted elsewhere shows
/// another namespace's links).
pub fn link_received_nothing(ifname: &str) -> bool {
    let table = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
    received_packets(&table, ifname) == Some(0)
}

/// The packets `ifname` received, from a `net/dev` table (`name: rx_bytes rx_packets …`).
fn received_packets(table: &str, ifname: &str) -> Option<u64> {
    table.lines().find_map(|line| {
        let (name, counters) = line.split_once(':')?;
        (name.trim() == ifname).then_some(())?;
        counters.split_whitespace().nth(1)?.parse().ok()
    })
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

#[cfg(test)]
mod tests {
    use super::received_packets;

    #[test]
    fn received_packets_are_read_by_exact_name() {
        let table = "Inter-|   Receive                            |  Transmit\n \
             face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets\n \
             sbx0123456789ab:       0       0    0    0    0     0          0         0      866      11\n \
             sbx0123456789a:     120       2    0    0    0     0          0         0        0       0\n";
        assert_eq!(received_packets(table, "sbx0123456789ab"), Some(0));
        assert_eq!(received_packets(table, "sbx0123456789a"), Some(2));
        assert_eq!(received_packets(table, "sbx01234"), None);
    }
}
