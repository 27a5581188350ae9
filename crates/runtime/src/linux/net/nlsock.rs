//! One netlink request/acknowledge exchange over a `netlink-sys` socket, for any
//! `netlink-packet-*` message family: a batch of requests whose acks are awaited, or a
//! dump whose answers are collected.

use netlink_packet_core::{
    NetlinkDeserializable, NetlinkMessage, NetlinkPayload, NetlinkSerializable, NLM_F_ACK,
    NLM_F_REQUEST,
};
use netlink_sys::protocols::NETLINK_NETFILTER;
use netlink_sys::{Socket, SocketAddr};
use std::io;
use std::os::fd::AsRawFd;

/// A reply not seen within this long is an error, not a hang (the kernel answers at
/// once; this only bounds a lost answer).
const REPLY_TIMEOUT: libc::timeval = libc::timeval {
    tv_sec: 10,
    tv_usec: 0,
};

/// A send larger than this (about what a socket's default send buffer takes) makes
/// the socket's send buffer big enough for it first.
const DEFAULT_SEND: usize = 64 << 10;

/// Sets socket option `name` of level `SOL_SOCKET` to `value`.
fn set_option<T>(sock: &Socket, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: setsockopt on a socket we own with a value of its own size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// A socket whose acks carry no copy of the request (`NETLINK_CAP_ACK`): an error
/// names its message by sequence number, and acks stay small. A `NETLINK_NETFILTER`
/// one is a kept one when there is one (see [`Lent`]).
fn open(protocol: isize) -> io::Result<Lent> {
    let netfilter = protocol == NETLINK_NETFILTER;
    let ns = netfilter.then(netns).flatten();
    if let Some(sock) = ns.and_then(kept) {
        return Ok(Lent {
            sock: Some(sock),
            ns,
            netfilter,
            done: false,
        });
    }
    let mut sock = Socket::new(protocol)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    set_option(&sock, libc::SO_RCVTIMEO, &REPLY_TIMEOUT)?;
    sock.set_cap_ack(true)?;
    Ok(Lent {
        sock: Some(sock),
        ns,
        netfilter,
        done: false,
    })
}

/// A socket for one exchange. Closing a `NETLINK_NETFILTER` socket waits, holding
/// nftables' commit lock, until the kernel has freed what earlier transactions released
/// (nf_tables flushes its destroy work, an RCU grace period, on every netfilter socket's
/// release): measured 7.5-12 ms after the shared table's batch, during which the next
/// transaction, and even a veth's creation (its netdev notifier takes the same lock),
/// wait. So such a socket is kept for the next exchange once this one was read to its
/// end (`done`), in the network namespace it was opened in; one that cannot be kept is
/// closed on a thread of its own.
struct Lent {
    sock: Option<Socket>,
    /// The network namespace it was opened in (dev, inode), when known.
    ns: Option<(u64, u64)>,
    netfilter: bool,
    /// Every answer of the exchange read: nothing is left queued on it.
    done: bool,
}

impl std::ops::Deref for Lent {
    type Target = Socket;
    fn deref(&self) -> &Socket {
        self.sock.as_ref().expect("open until dropped")
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(sock) = self.sock.take() else {
            return;
        };
        if !self.netfilter {
            return;
        }
        match (self.done, self.ns) {
            (true, Some(ns)) => keep(ns, sock),
            _ => close_aside(sock),
        }
    }
}

/// How many netfilter sockets are kept, the most recently used last.
const KEPT: usize = 4;
static KEPT_SOCKETS: std::sync::Mutex<Vec<((u64, u64), Socket)>> =
    std::sync::Mutex::new(Vec::new());

/// The calling thread's network namespace (dev, inode).
fn netns() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata("/proc/thread-self/ns/net").ok()?;
    Some((meta.dev(), meta.ino()))
}

/// A kept socket of namespace `ns`, with nothing queued on it.
fn kept(ns: (u64, u64)) -> Option<Socket> {
    let mut kept = KEPT_SOCKETS.lock().unwrap_or_else(|p| p.into_inner());
    let at = kept.iter().position(|(n, _)| *n == ns)?;
    let (_, sock) = kept.remove(at);
    drop(kept);
    // An answer queued after its exchange ended (none is expected: `transact` reads
    // what follows its last ack) is read away; a socket that reports an error instead
    // (an overrun) is not used again.
    let mut buf = [0u8; 256];
    loop {
        match sock.recv(&mut &mut buf[..], libc::MSG_DONTWAIT) {
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                close_aside(sock);
                return None;
            }
        }
    }
    #[cfg(test)]
    REUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some(sock)
}

/// Kept sockets handed out again (for the tests to see that reuse happened).
#[cfg(test)]
pub(super) static REUSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Keeps `sock` of namespace `ns`. When [`KEPT`] are kept already, the one used
/// longest ago goes (closed aside): a namespace no exchange uses again does not hold
/// a place, or stay alive through its socket, for the rest of the process's life.
fn keep(ns: (u64, u64), sock: Socket) {
    let mut kept = KEPT_SOCKETS.lock().unwrap_or_else(|p| p.into_inner());
    let evicted = (kept.len() >= KEPT).then(|| kept.remove(0));
    kept.push((ns, sock));
    drop(kept);
    if let Some((_, old)) = evicted {
        close_aside(old);
    }
}

/// Sockets waiting for the closer thread; a full queue (or no thread) closes here.
const CLOSE_QUEUE: usize = 64;

/// Hands `sock` to the closer thread (started at the first), or closes it here.
fn close_aside(sock: Socket) {
    use std::sync::mpsc::{sync_channel, SyncSender};
    use std::sync::OnceLock;
    static CLOSER: OnceLock<Option<SyncSender<Socket>>> = OnceLock::new();
    let closer = CLOSER.get_or_init(|| {
        let (tx, rx) = sync_channel::<Socket>(CLOSE_QUEUE);
        std::thread::Builder::new()
            .name("netlink-closer".into())
            .spawn(move || {
                // Started by whichever thread first closed a socket aside, it would keep
                // that thread's network namespace alive for the process's life: it joins
                // the main thread's (`/proc/self` is the thread group's leader).
                let joined = std::fs::File::open("/proc/self/ns/net")
                    .map_err(|e| e.to_string())
                    .and_then(|ns| {
                        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
                            .map_err(|e| e.to_string())
                    });
                if let Err(e) = joined {
                    tracing::debug!(error = %e, "the netlink closer keeps its starter's namespace");
                }
                rx.into_iter().for_each(drop)
            })
            .ok()
            .map(|_| tx)
    });
    if let Some(tx) = closer {
        // Full or gone: the socket comes back in the error, and closes here.
        let _ = tx.try_send(sock);
    }
}

/// Lets `sock` send `len` bytes in one message: netlink refuses (`EMSGSIZE`) a
/// message larger than the send buffer, which is capped by `wmem_max` unless forced
/// (`CAP_NET_ADMIN`, which programming nftables needs anyway).
fn room_to_send(sock: &Socket, len: usize) -> io::Result<()> {
    if len <= DEFAULT_SEND {
        return Ok(());
    }
    let size = libc::c_int::try_from(len + 4096).unwrap_or(libc::c_int::MAX);
    set_option(sock, libc::SO_SNDBUFFORCE, &size)
        .or_else(|_| set_option(sock, libc::SO_SNDBUF, &size))
}

fn bad(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Serializes `msgs` (numbered from 1, `flags` plus request) into one buffer.
fn serialize<I: NetlinkSerializable>(msgs: Vec<(NetlinkMessage<I>, u16)>) -> (Vec<u8>, u32) {
    let mut out = Vec::new();
    let mut seq = 0;
    for (mut msg, flags) in msgs {
        seq += 1;
        msg.header.flags = flags | NLM_F_REQUEST;
        msg.header.sequence_number = seq;
        msg.finalize();
        let at = out.len();
        out.resize(at + msg.buffer_len(), 0);
        msg.serialize(&mut out[at..]);
    }
    (out, seq)
}

/// Reads datagrams, handing each message to `each` until it says to stop (`Some`).
fn read<I, T>(
    sock: &Socket,
    each: impl FnMut(NetlinkMessage<I>) -> io::Result<Option<T>>,
) -> io::Result<T>
where
    I: NetlinkDeserializable,
{
    read_with(sock, 0, each)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "no netlink answer in time"))
}

/// [`read`] with `recv` flags `flags`; `None` once nothing more is queued (with
/// `MSG_DONTWAIT`) or the receive timeout passed.
fn read_with<I, T>(
    sock: &Socket,
    flags: libc::c_int,
    mut each: impl FnMut(NetlinkMessage<I>) -> io::Result<Option<T>>,
) -> io::Result<Option<T>>
where
    I: NetlinkDeserializable,
{
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match sock.recv(&mut &mut buf[..], flags) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut rest = &buf[..n.min(buf.len())];
        while !rest.is_empty() {
            let msg = NetlinkMessage::<I>::deserialize(rest).map_err(bad)?;
            let len = (msg.header.length as usize + 3) & !3;
            if let Some(done) = each(msg)? {
                return Ok(Some(done));
            }
            rest = rest.get(len.max(1)..).unwrap_or_default();
        }
    }
}

/// Sends `msgs` in one write and waits for the acks of those whose `flags` ask for
/// one; the first error answers for the whole send (nfnetlink batches are all or
/// nothing, and report an error of any message, asked or not, before the acks of
/// the messages after it). An `ENOBUFS` means replies were lost: whether the
/// request took effect is unknown.
pub fn transact<I>(protocol: isize, msgs: Vec<(NetlinkMessage<I>, u16)>) -> io::Result<()>
where
    I: NetlinkSerializable + NetlinkDeserializable,
{
    let acked = msgs.iter().filter(|(_, f)| f & NLM_F_ACK != 0).count();
    let (bytes, _) = serialize(msgs);
    let mut sock = open(protocol)?;
    room_to_send(&sock, bytes.len())?;
    sock.send(&bytes, 0)?;
    if acked == 0 {
        return Ok(());
    }
    let mut seen = 0;
    read(&sock, |msg: NetlinkMessage<I>| match msg.payload {
        NetlinkPayload::Error(e) if e.code.is_some() => Err(e.to_io()),
        NetlinkPayload::Error(_) => {
            seen += 1;
            Ok((seen == acked).then_some(()))
        }
        _ => Ok(None),
    })?;
    // The kernel answered the whole send before `send` returned: an error of a message
    // after the last one asked to ack (the batch then took no effect) is queued behind
    // that ack. Read to the queue's end, so it is not lost (nor left for the next
    // exchange of a kept socket).
    trailing_error::<I>(&sock)?;
    sock.done = true;
    Ok(())
}

/// The first error answered among the messages queued on `sock` now (read without
/// waiting, to the queue's end).
fn trailing_error<I: NetlinkDeserializable>(sock: &Socket) -> io::Result<()> {
    let mut first = None;
    read_with(sock, libc::MSG_DONTWAIT, |msg: NetlinkMessage<I>| {
        if let NetlinkPayload::Error(e) = msg.payload {
            if e.code.is_some() && first.is_none() {
                first = Some(e.to_io());
            }
        }
        Ok(None::<()>)
    })?;
    first.map_or(Ok(()), Err)
}

/// Sends the dump request `msg` and returns the messages answering it, read as `A`.
pub fn dump<Q, A>(protocol: isize, msg: NetlinkMessage<Q>, flags: u16) -> io::Result<Vec<A>>
where
    Q: NetlinkSerializable,
    A: NetlinkDeserializable,
{
    let (bytes, _) = serialize(vec![(msg, flags)]);
    let mut sock = open(protocol)?;
    sock.send(&bytes, 0)?;
    let mut got = Vec::new();
    read(&sock, |msg: NetlinkMessage<A>| match msg.payload {
        NetlinkPayload::Done(_) => Ok(Some(())),
        NetlinkPayload::Error(e) if e.code.is_some() => Err(e.to_io()),
        NetlinkPayload::InnerMessage(m) => {
            got.push(m);
            Ok(None)
        }
        _ => Ok(None),
    })?;
    sock.done = true;
    Ok(got)
}
