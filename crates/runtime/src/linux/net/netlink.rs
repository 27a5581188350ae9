//! The rtnetlink requests that have no ioctl, through `netlink-packet-route`: a veth
//! pair whose peer is made directly in the sandbox's network namespace, and deleting a
//! link by name. Sent in-process (an `ip` process costs a few ms of fork and exec on the
//! start and destroy paths).

use super::nlsock;
use crate::RuntimeError;
use netlink_packet_core::{NetlinkMessage, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::protocols::NETLINK_ROUTE;
use std::os::fd::{AsRawFd, BorrowedFd};

fn err(what: &str, e: std::io::Error) -> RuntimeError {
    RuntimeError::Network(format!("{what}: {e}"))
}

fn link(attributes: Vec<LinkAttribute>) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.attributes = attributes;
    msg
}

/// The RTM_NEWLINK request: `host` here, its peer `peer` in the netns `ns` names
/// (`NetNsPid` or `NetNsFd`).
fn veth_request(host: &str, peer: &str, ns: LinkAttribute) -> RouteNetlinkMessage {
    let peer = link(vec![LinkAttribute::IfName(peer.into()), ns]);
    RouteNetlinkMessage::NewLink(link(vec![
        LinkAttribute::IfName(host.into()),
        LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]),
    ]))
}

/// The RTM_DELLINK request for the link named `name`.
fn delete_request(name: &str) -> RouteNetlinkMessage {
    RouteNetlinkMessage::DelLink(link(vec![LinkAttribute::IfName(name.into())]))
}

/// Makes the veth pair `host` (in our netns) / `peer` (in the netns `ns` is open on).
pub fn create_veth(host: &str, peer: &str, ns: BorrowedFd<'_>) -> Result<(), RuntimeError> {
    let request = veth_request(host, peer, LinkAttribute::NetNsFd(ns.as_raw_fd()));
    let msg = NetlinkMessage::from(request);
    nlsock::transact(
        NETLINK_ROUTE,
        vec![(msg, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)],
    )
    .map_err(|e| err(&format!("creating veth {host}"), e))
}

/// Deletes link `name` (with a veth, its peer goes too). `ENODEV`: there was none.
pub fn delete_link(name: &str) -> Result<(), std::io::Error> {
    let msg = NetlinkMessage::from(delete_request(name));
    nlsock::transact(NETLINK_ROUTE, vec![(msg, NLM_F_ACK)])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serialized request, as sent.
    fn bytes(msg: RouteNetlinkMessage) -> Vec<u8> {
        let mut msg = NetlinkMessage::from(msg);
        msg.finalize();
        let mut out = vec![0; msg.buffer_len()];
        msg.serialize(&mut out);
        out
    }

    #[test]
    fn the_request_nests_the_peer_with_its_namespace() {
        const IFLA_NET_NS_PID: u16 = 19;
        let msg = bytes(veth_request("sbxabc", "eth0", LinkAttribute::NetNsPid(42)));
        assert_eq!(
            u32::from_ne_bytes(msg[0..4].try_into().expect("len")) as usize,
            msg.len()
        );
        assert_eq!(msg.len() % 4, 0);
        let find = |needle: &[u8]| msg.windows(needle.len()).position(|w| w == needle);
        let (veth, eth0) = (
            find(b"veth\0").expect("kind"),
            find(b"eth0\0").expect("peer"),
        );
        assert!(find(b"sbxabc\0").expect("host") < veth && veth < eth0);
        let pid_attr = [8u16.to_ne_bytes(), IFLA_NET_NS_PID.to_ne_bytes()].concat();
        let at = find(&pid_attr).expect("netns attribute");
        assert!(at > veth, "the namespace is the peer's");
        assert_eq!(&msg[at + 4..at + 8], &42u32.to_ne_bytes());
    }

    #[test]
    fn a_delete_names_the_link() {
        const RTM_DELLINK: u16 = 17;
        let msg = bytes(delete_request("sbxabc"));
        assert_eq!(u16::from_ne_bytes([msg[4], msg[5]]), RTM_DELLINK);
        assert_eq!(msg.len() % 4, 0);
        assert!(msg.windows(7).any(|w| w == b"sbxabc\0"));
        assert_eq!(
            delete_link("sbxnosuchlink").map_err(|e| e.raw_os_error()),
            Err(Some(libc::ENODEV)),
            "a missing link is ENODEV (needs CAP_NET_ADMIN: EPERM otherwise)"
        );
    }
}
