//! Socket families and netlink protocols a sandbox has no use for: each is kernel code
//! reachable from inside (vsock reaches the hypervisor), so creating one must fail.

use crate::report::Attempt;

/// Families outside the documented list (unix, inet, inet6, netlink), by name.
const FAMILIES: [(&str, libc::c_int); 16] = [
    ("AF_VSOCK", libc::AF_VSOCK),
    ("AF_XDP", libc::AF_XDP),
    ("AF_PACKET", libc::AF_PACKET),
    ("AF_ALG", libc::AF_ALG),
    ("AF_KEY", libc::AF_KEY),
    ("AF_BLUETOOTH", libc::AF_BLUETOOTH),
    ("AF_CAN", libc::AF_CAN),
    ("AF_TIPC", libc::AF_TIPC),
    ("AF_RDS", libc::AF_RDS),
    ("AF_LLC", libc::AF_LLC),
    ("AF_PPPOX", libc::AF_PPPOX),
    ("AF_X25", libc::AF_X25),
    ("AF_AX25", libc::AF_AX25),
    ("AF_APPLETALK", libc::AF_APPLETALK),
    ("AF_KCM", 41),
    ("AF_QIPCRTR", 42),
];

/// Netlink protocols outside route, sock_diag and generic.
const NETLINK: [(&str, libc::c_int); 5] = [
    ("NETLINK_NETFILTER", libc::NETLINK_NETFILTER),
    ("NETLINK_XFRM", libc::NETLINK_XFRM),
    ("NETLINK_AUDIT", libc::NETLINK_AUDIT),
    ("NETLINK_KOBJECT_UEVENT", libc::NETLINK_KOBJECT_UEVENT),
    ("NETLINK_CONNECTOR", libc::NETLINK_CONNECTOR),
];

const TYPES: [libc::c_int; 4] = [
    libc::SOCK_STREAM,
    libc::SOCK_DGRAM,
    libc::SOCK_RAW,
    libc::SOCK_SEQPACKET,
];

pub fn attempts() -> Vec<Attempt> {
    let mut out: Vec<Attempt> = FAMILIES
        .iter()
        .map(|(name, family)| open_any(&format!("socket({name})"), *family, 0))
        .collect();
    out.extend(NETLINK.iter().map(|(name, proto)| {
        open_any(
            &format!("socket(AF_NETLINK, {name})"),
            libc::AF_NETLINK,
            *proto,
        )
    }));
    out
}

/// Tries every socket type; escaped if any of them opens.
fn open_any(what: &str, family: libc::c_int, protocol: libc::c_int) -> Attempt {
    let mut last = None;
    for ty in TYPES {
        // SAFETY: socket(2) with integer arguments; the descriptor is closed at once.
        let fd = unsafe { libc::socket(family, ty | libc::SOCK_CLOEXEC, protocol) };
        if fd >= 0 {
            // SAFETY: closing the descriptor just opened.
            unsafe { libc::close(fd) };
            return Attempt::escaped(what, format!("opened as type {ty}"));
        }
        last = Some(std::io::Error::last_os_error());
    }
    let err = last.map(crate::report::errno_name).unwrap_or_default();
    Attempt::refused(what, err)
}
