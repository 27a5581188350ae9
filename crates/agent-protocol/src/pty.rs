//! The PTY route: `GET /v1/pty?cols=C&rows=R&cwd=P` (and optionally `&uid=U&gid=G&groups=…`,
//! the ids the shell runs as) with `Upgrade: sandboxd-pty` answers
//! 101 and turns the connection into frames `[kind u8][length u32 BE][payload]`:
//! `0` data (either way), `1` resize (to the agent: cols u16 BE, rows u16 BE), `2` exit
//! (from the agent, last: exit code i32 BE, 128+N for signal N).

use crate::client::{AgentClient, ClientError};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;

/// Value of the `Upgrade` header.
pub const UPGRADE: &str = "sandboxd-pty";
/// Largest frame payload accepted.
pub const MAX_PAYLOAD: usize = 64 * 1024;

/// One frame of a PTY connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PtyFrame {
    Data(Bytes),
    Resize { cols: u16, rows: u16 },
    Exit(i32),
}

/// The raw upgraded connection to the agent.
pub type PtyIo = TokioIo<Upgraded>;

impl PtyFrame {
    pub fn encode(&self) -> Bytes {
        let (kind, payload): (u8, Bytes) = match self {
            PtyFrame::Data(d) => (0, d.clone()),
            PtyFrame::Resize { cols, rows } => {
                let mut p = BytesMut::with_capacity(4);
                p.put_u16(*cols);
                p.put_u16(*rows);
                (1, p.freeze())
            }
            PtyFrame::Exit(code) => (2, Bytes::copy_from_slice(&code.to_be_bytes())),
        };
        let mut out = BytesMut::with_capacity(5 + payload.len());
        out.put_u8(kind);
        out.put_u32(payload.len() as u32);
        out.extend_from_slice(&payload);
        out.freeze()
    }

    /// Takes one whole frame off the front of `buf`; `None` until one is complete.
    pub fn decode(buf: &mut BytesMut) -> Result<Option<PtyFrame>, String> {
        if buf.len() < 5 {
            return Ok(None);
        }
        let kind = buf[0];
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(format!("PTY frame of {len} bytes is too large"));
        }
        if buf.len() < 5 + len {
            return Ok(None);
        }
        buf.advance(5);
        let mut p = buf.split_to(len).freeze();
        match (kind, len) {
            (0, _) => Ok(Some(PtyFrame::Data(p))),
            (1, 4) => Ok(Some(PtyFrame::Resize {
                cols: p.get_u16(),
                rows: p.get_u16(),
            })),
            (2, 4) => Ok(Some(PtyFrame::Exit(p.get_i32()))),
            _ => Err(format!("bad PTY frame kind {kind} of {len} bytes")),
        }
    }
}

impl AgentClient {
    /// Starts an interactive login shell on a new PTY of `cols`×`rows` in `cwd` and
    /// returns the upgraded connection carrying its frames.
    pub async fn open_pty(&self, cols: u16, rows: u16, cwd: &str) -> Result<PtyIo, ClientError> {
        self.open_pty_as(cols, rows, cwd, None).await
    }

    /// [`AgentClient::open_pty`], the shell running as `user` when given.
    pub async fn open_pty_as(
        &self,
        cols: u16,
        rows: u16,
        cwd: &str,
        user: Option<&crate::UserIds>,
    ) -> Result<PtyIo, ClientError> {
        let socket = self.socket();
        let stream = crate::socket_path::connect_async(socket)
            .await
            .map_err(|source| ClientError::Connect {
                path: socket.to_owned(),
                source,
            })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ClientError::Protocol(format!("handshake failed: {e}")))?;
        tokio::spawn(conn.with_upgrades());
        let cwd = crate::query::encode_component(cwd);
        let as_user = match user {
            Some(u) => {
                let groups: Vec<String> = u.groups.iter().map(u32::to_string).collect();
                format!("&uid={}&gid={}&groups={}", u.uid, u.gid, groups.join(","))
            }
            None => String::new(),
        };
        let req = hyper::Request::get(format!(
            "/v1/pty?cols={cols}&rows={rows}&cwd={cwd}{as_user}"
        ))
        .header("host", "agent")
        .header("connection", "upgrade")
        .header("upgrade", UPGRADE)
        .body(crate::transport::empty())
        .map_err(|e| ClientError::Protocol(format!("bad request: {e}")))?;
        let mut resp = sender
            .send_request(req)
            .await
            .map_err(|e| ClientError::Protocol(format!("request failed: {e}")))?;
        if resp.status() != hyper::StatusCode::SWITCHING_PROTOCOLS {
            let status = resp.status();
            let body = crate::transport::collect(resp, crate::limits::SMALL_ANSWER_BYTES).await?;
            return Err(match serde_json::from_slice(&body) {
                Ok(err) => ClientError::Agent(err),
                Err(_) => ClientError::Protocol(format!("PTY upgrade refused: HTTP {status}")),
            });
        }
        let upgraded = hyper::upgrade::on(&mut resp)
            .await
            .map_err(|e| ClientError::Protocol(format!("PTY upgrade failed: {e}")))?;
        Ok(TokioIo::new(upgraded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_pieces() {
        let frames = [
            PtyFrame::Data(Bytes::from_static(b"\x00\xffhi")),
            PtyFrame::Resize {
                cols: 132,
                rows: 43,
            },
            PtyFrame::Exit(-1),
        ];
        let wire: Vec<u8> = frames.iter().flat_map(|f| f.encode().to_vec()).collect();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for byte in wire {
            buf.put_u8(byte);
            while let Some(f) = PtyFrame::decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        assert_eq!(out, frames);
    }

    #[test]
    fn rejects_bad_frames() {
        let mut buf = BytesMut::from(&[1u8, 0, 0, 0, 3, 1, 2, 3][..]);
        assert!(PtyFrame::decode(&mut buf).is_err());
        let mut buf = BytesMut::from(&[0u8, 0xff, 0, 0, 0][..]);
        assert!(PtyFrame::decode(&mut buf).is_err());
    }
}
