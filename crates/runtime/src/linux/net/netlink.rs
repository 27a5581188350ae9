//! The rtnetlink requests that have no ioctl: a veth pair whose peer is made directly
//! in the sandbox's network namespace, and deleting a link by name. Sent in-process (an
//! `ip` process costs a few ms of fork and exec on the start and destroy paths).

use crate::RuntimeError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_PID: u16 = 19;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const NLA_F_NESTED: u16 = 0x8000;
/// `struct ifinfomsg`: family, pad, type, index, flags, change (all zero here).
const IFINFOMSG_LEN: usize = 16;
const NLMSGHDR_LEN: usize = 16;

fn err(what: &str, e: std::io::Error) -> RuntimeError {
    RuntimeError::Network(format!("{what}: {e}"))
}

/// A netlink message body under construction (attributes 4-byte aligned).
struct Body(Vec<u8>);

impl Body {
    fn pad(&mut self) {
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
    }

    fn attr(&mut self, kind: u16, payload: &[u8]) {
        let len = (4 + payload.len()) as u16;
        self.0.extend_from_slice(&len.to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(payload);
        self.pad();
    }

    fn name(&mut self, kind: u16, name: &str) {
        let mut bytes = name.as_bytes().to_vec();
        bytes.push(0);
        self.attr(kind, &bytes);
    }

    /// A nested attribute whose payload `fill` writes; its length is patched after.
    fn nested(&mut self, kind: u16, fill: impl FnOnce(&mut Body)) {
        let start = self.0.len();
        self.attr(kind | NLA_F_NESTED, &[]);
        fill(self);
        let len = (self.0.len() - start) as u16;
        self.0[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    }
}

/// A whole message: header (`kind`, `flags` plus request and ack, `seq`) and `body`.
fn message(kind: u16, flags: u16, seq: u32, body: &Body) -> Vec<u8> {
    let mut msg = Vec::with_capacity(NLMSGHDR_LEN + body.0.len());
    msg.extend_from_slice(&((NLMSGHDR_LEN + body.0.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&body.0);
    msg
}

/// The RTM_DELLINK request for the link named `name`.
fn delete_request(name: &str, seq: u32) -> Vec<u8> {
    let mut body = Body(vec![0; IFINFOMSG_LEN]);
    body.name(IFLA_IFNAME, name);
    message(RTM_DELLINK, 0, seq, &body)
}

/// The RTM_NEWLINK request: `host` here, its peer `peer` in the netns of `pid`.
fn veth_request(host: &str, peer: &str, pid: i32, seq: u32) -> Vec<u8> {
    let mut body = Body(vec![0; IFINFOMSG_LEN]);
    body.name(IFLA_IFNAME, host);
    body.nested(IFLA_LINKINFO, |b| {
        b.name(IFLA_INFO_KIND, "veth");
        b.nested(IFLA_INFO_DATA, |b| {
            b.nested(VETH_INFO_PEER, |b| {
                b.0.extend_from_slice(&[0; IFINFOMSG_LEN]);
                b.name(IFLA_IFNAME, peer);
                b.attr(IFLA_NET_NS_PID, &(pid as u32).to_ne_bytes());
            });
        });
    });
    message(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, seq, &body)
}

/// The errno of the ack answering `seq` (0: done).
fn ack_errno(reply: &[u8], seq: u32) -> Option<i32> {
    let mut rest = reply;
    while rest.len() >= NLMSGHDR_LEN + 4 {
        let len = u32::from_ne_bytes(rest[0..4].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(rest[4..6].try_into().ok()?);
        let got = u32::from_ne_bytes(rest[8..12].try_into().ok()?);
        if kind == NLMSG_ERROR && got == seq {
            let code = i32::from_ne_bytes(rest[16..20].try_into().ok()?);
            return Some(-code);
        }
        let step = (len + 3) & !3;
        if step == 0 || step > rest.len() {
            return None;
        }
        rest = &rest[step..];
    }
    None
}

/// Makes the veth pair `host` (in our netns) / `peer` (in the netns of `pid`).
pub fn create_veth(host: &str, peer: &str, pid: i32) -> Result<(), RuntimeError> {
    let seq = 1;
    send(&veth_request(host, peer, pid, seq), seq)
        .map_err(|e| err(&format!("creating veth {host}"), e))
}

/// Deletes link `name` (with a veth, its peer goes too). `ENODEV`: there was none.
pub fn delete_link(name: &str) -> Result<(), std::io::Error> {
    let seq = 1;
    send(&delete_request(name, seq), seq)
}

/// Sends one request `msg` numbered `seq` and waits for its ack.
fn send(msg: &[u8], seq: u32) -> Result<(), std::io::Error> {
    // SAFETY: plain socket(2); the fd is owned right away.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain old data; all-zero addresses the kernel.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: msg and kernel outlive the call; the lengths are theirs.
    let sent = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut reply = vec![0u8; 8192];
    loop {
        // SAFETY: reply is a writable buffer of its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        match ack_errno(&reply[..n as usize], seq) {
            Some(0) => return Ok(()),
            Some(errno) => return Err(std::io::Error::from_raw_os_error(errno)),
            None => continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_nests_the_peer_with_its_namespace() {
        let msg = veth_request("sbxabc", "eth0", 42, 7);
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
        assert_eq!(&msg[at + 4..at + 8], &42u32.to_ne_bytes());
    }

    #[test]
    fn a_delete_names_the_link() {
        let msg = delete_request("sbxabc", 3);
        assert_eq!(u16::from_ne_bytes([msg[4], msg[5]]), RTM_DELLINK);
        assert_eq!(msg.len() % 4, 0);
        assert!(msg.windows(7).any(|w| w == b"sbxabc\0"));
        assert_eq!(
            delete_link("sbxnosuchlink").map_err(|e| e.raw_os_error()),
            Err(Some(libc::ENODEV)),
            "a missing link is ENODEV (needs CAP_NET_ADMIN: EPERM otherwise)"
        );
    }

    #[test]
    fn acks_are_read_by_sequence() {
        let mut ack = vec![0u8; 36];
        ack[0..4].copy_from_slice(&36u32.to_ne_bytes());
        ack[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        ack[8..12].copy_from_slice(&5u32.to_ne_bytes());
        ack[16..20].copy_from_slice(&(-17i32).to_ne_bytes());
        assert_eq!(ack_errno(&ack, 5), Some(17));
        assert_eq!(ack_errno(&ack, 6), None);
        assert_eq!(ack_errno(&ack[..10], 5), None);
    }
}
