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

/// One query, as RFC 5452 asks of a resolver's client: a random id from a random port,
/// the socket connected to the resolver (the kernel drops datagrams from anyone else),
/// and an answer taken only if it echoes the question asked. The answers go into a cache
/// every workspace's policies use, so a guessable query would let one tenant poison
/// another's allowed domains.
fn query(name: &str, server: SocketAddr) -> Option<(Vec<Ipv4Addr>, u32)> {
    let sock = UdpSocket::bind("0.0.0.0:0").ok()?;
    sock.set_read_timeout(Some(TIMEOUT)).ok()?;
    sock.connect(server).ok()?;
    let random = uuid::Uuid::new_v4();
    let id = u16::from_be_bytes([random.as_bytes()[0], random.as_bytes()[1]]);
    let question = encode_query(id, name);
    sock.send(&question).ok()?;
    let mut buf = [0u8; 1500];
    for _ in 0..4 {
        let n = sock.recv(&mut buf).ok()?;
        if let Some(answer) = parse_answer(&question, &buf[..n]) {
            return Some(answer);
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

/// A records of a response to `query` (as [`encode_query`] made it: its id, and its one
/// question echoed, names compared without regard to case) and their least TTL
/// (`u32::MAX` with none); `None` if it is not one.
pub fn parse_answer(query: &[u8], msg: &[u8]) -> Option<(Vec<Ipv4Addr>, u32)> {
    if query.len() < 12 || msg.len() < 12 || msg[0..2] != query[0..2] || msg[2] & 0x80 == 0 {
        return None;
    }
    let qd = u16::from_be_bytes([msg[4], msg[5]]);
    let an = u16::from_be_bytes([msg[6], msg[7]]);
    let asked = &query[12..];
    let echoed = msg.get(12..12 + asked.len())?;
    if qd != 1 || !echoed.eq_ignore_ascii_case(asked) {
        return None;
    }
    let mut at = 12 + asked.len();
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
        let (got, ttl) = parse_answer(&q, &r).expect("answer");
        assert_eq!(
            got,
            [Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 9)]
        );
        assert_eq!(ttl, 30, "the least TTL");
        assert_eq!(parse_answer(&encode_query(0x9999, "good.test"), &r), None);
        assert_eq!(parse_answer(&q, &q), None, "a query is not an answer");
        assert_eq!(parse_answer(&q, &r[..r.len() - 3]), None, "truncated");
        let mut upper = r.clone();
        upper[13..17].copy_from_slice(b"GOOD");
        assert!(
            parse_answer(&q, &upper).is_some(),
            "the name's case may differ"
        );
    }

    /// Regression (REVIEW13 #6): an answer with the right id for another name (a spoofed
    /// or stray one) used to be taken for the name asked.
    #[test]
    fn an_answer_to_another_question_is_not_taken() {
        let q = encode_query(0x1234, "good.test");
        let other = encode_query(0x1234, "evil.test");
        let mut r = other.clone();
        r[2] = 0x81;
        r[3] = 0x80;
        r[7] = 1;
        r.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 203, 0, 113, 7]);
        assert!(parse_answer(&other, &r).is_some());
        assert_eq!(parse_answer(&q, &r), None);
    }

    /// Regression (REVIEW13 #6): the id was the same for every name of one length.
    #[test]
    fn queries_from_a_real_socket_carry_random_ids() {
        let server = UdpSocket::bind("127.0.0.1:0").expect("bind");
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let port = server.local_addr().expect("addr").port();
        let ask = std::thread::spawn(move || {
            for name in ["aa.example", "bb.example", "cc.example", "dd.example"] {
                // No answer comes: each query times out after TIMEOUT.
                let _ = resolve_a(name, &[Ipv4Addr::LOCALHOST], port);
            }
        });
        let mut ids = std::collections::HashSet::new();
        let mut buf = [0u8; 512];
        for _ in 0..4 {
            let (n, _) = server.recv_from(&mut buf).expect("a query");
            assert!(n > 12);
            ids.insert(u16::from_be_bytes([buf[0], buf[1]]));
        }
        ask.join().expect("asker");
        assert!(
            ids.len() >= 3,
            "ids of four queries for names of one length: {ids:?}"
        );
    }
}
