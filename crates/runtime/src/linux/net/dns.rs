//! A minimal DNS client (one A query over UDP) for resolving the domain rules of a
//! policy against the configured resolvers, never the host's libc resolver.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(2);

/// Shortest time an answer is kept (also an empty one, or none at all).
pub const MIN_TTL: Duration = Duration::from_secs(5);
/// Longest time an answer is kept, whatever its TTL says.
pub const MAX_TTL: Duration = Duration::from_secs(300);

/// The IPv4 addresses `name` resolves to at the first resolver that answers on `port` (empty on
/// NXDOMAIN or when none answers), and how long that answer holds (its records' least
/// TTL within [`MIN_TTL`, `MAX_TTL`]).
pub fn resolve_a(name: &str, resolvers: &[Ipv4Addr], port: u16) -> (Vec<Ipv4Addr>, Duration) {
    for server in resolvers {
        if let Some((addrs, ttl)) = query(name, SocketAddr::from((*server, port))) {
            let ttl = Duration::from_secs(ttl.into()).clamp(MIN_TTL, MAX_TTL);
            return (addrs, ttl);
        }
    }
    (Vec::new(), MIN_TTL)
}

fn query(name: &str, server: SocketAddr) -> Option<(Vec<Ipv4Addr>, u32)> {
    let sock = UdpSocket::bind("0.0.0.0:0").ok()?;
    sock.set_read_timeout(Some(TIMEOUT)).ok()?;
    let id = (std::process::id() as u16) ^ (name.len() as u16).rotate_left(7);
    sock.send_to(&encode_query(id, name), server).ok()?;
    let mut buf = [0u8; 1500];
    for _ in 0..4 {
        let (n, from) = sock.recv_from(&mut buf).ok()?;
        if from == server {
            if let Some(answer) = parse_answer(id, &buf[..n]) {
                return Some(answer);
            }
        }
    }
    None
}

/// A recursive query for the A records of `name`.
pub fn encode_query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        q.push(label.len().min(63) as u8);
        q.extend_from_slice(&label.as_bytes()[..label.len().min(63)]);
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// A records of a response to query `id` and their least TTL (`u32::MAX` with none);
/// `None` if it is not one.
pub fn parse_answer(id: u16, msg: &[u8]) -> Option<(Vec<Ipv4Addr>, u32)> {
    if msg.len() < 12 || msg[0..2] != id.to_be_bytes() || msg[2] & 0x80 == 0 {
        return None;
    }
    let qd = u16::from_be_bytes([msg[4], msg[5]]);
    let an = u16::from_be_bytes([msg[6], msg[7]]);
    let mut at = 12;
    for _ in 0..qd {
        at = skip_name(msg, at)? + 4;
    }
    let (mut out, mut ttl) = (Vec::new(), u32::MAX);
    for _ in 0..an {
        at = skip_name(msg, at)?;
        let head = msg.get(at..at + 10)?;
        let (kind, class) = (
            u16::from_be_bytes([head[0], head[1]]),
            u16::from_be_bytes([head[2], head[3]]),
        );
        let len = usize::from(u16::from_be_bytes([head[8], head[9]]));
        let data = msg.get(at + 10..at + 10 + len)?;
        if kind == 1 && class == 1 && len == 4 {
            out.push(Ipv4Addr::new(data[0], data[1], data[2], data[3]));
            ttl = ttl.min(u32::from_be_bytes([head[4], head[5], head[6], head[7]]));
        }
        at += 10 + len;
    }
    Some((out, ttl))
}

fn skip_name(msg: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *msg.get(at)?;
        match len {
            0 => return Some(at + 1),
            l if l & 0xC0 == 0xC0 => return Some(at + 2),
            l => at += 1 + usize::from(l),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_with_compressed_name_parses() {
        let q = encode_query(0x1234, "good.test");
        let mut r = q.clone();
        r[2] = 0x81;
        r[3] = 0x80;
        r[7] = 2; // two answers
        for (ip, ttl) in [([198, 18, 0, 2], 60), ([198, 18, 0, 9], 30)] {
            r.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, ttl, 0, 4]);
            r.extend_from_slice(&ip);
        }
        let (got, ttl) = parse_answer(0x1234, &r).expect("answer");
        assert_eq!(
            got,
            [Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 9)]
        );
        assert_eq!(ttl, 30, "the least TTL");
        assert_eq!(parse_answer(0x9999, &r), None);
        assert_eq!(parse_answer(0x1234, &q), None, "a query is not an answer");
        assert_eq!(parse_answer(0x1234, &r[..r.len() - 3]), None, "truncated");
    }
}
