//! A client for the OpenRelay dialect's tests over a real `sandboxd serve`: JSON and
//! NDJSON requests with any headers, and a stream that can be read line by line.

#![allow(dead_code)]

use crate::serve_bin::{cli, http, Reply, Server};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

pub const MASTER: &str = "openrelay-test-master-key";

/// A server plus the key requests are made with.
pub struct Or {
    pub server: Server,
    pub key: String,
}

impl Or {
    pub fn start(data: &Path, env: &[(&str, &str)]) -> Or {
        Or {
            server: Server::start_with_env(data, Some(MASTER), env),
            key: MASTER.into(),
        }
    }

    pub fn with_key(&self, key: &str) -> Or2<'_> {
        Or2 {
            or: self,
            key: key.to_owned(),
        }
    }

    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        send(&self.server, &self.key, method, path, headers, body)
    }

    pub fn get(&self, path: &str) -> Reply {
        self.send("GET", path, &[], "")
    }

    pub fn post(&self, path: &str, body: &Value) -> Reply {
        self.send("POST", path, &[], &body.to_string())
    }

    /// Creates a sandbox (JSON) and returns its view.
    pub fn create(&self, body: &Value) -> Value {
        let r = self.post("/v1/sandboxes", body);
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()
    }

    pub fn delete(&self, id: &str) -> Value {
        let r = self.send("DELETE", &format!("/v1/sandboxes/{id}"), &[], "");
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    /// Active sandbox ids, newest first.
    pub fn active(&self) -> Vec<String> {
        ids(&self.get("/v1/sandboxes").json())
    }
}

impl Drop for Or {
    /// Deletes every sandbox still active (a failed test included) before the server
    /// stops, since stopping a server leaves its sandboxes running. Never panics.
    fn drop(&mut self) {
        let Some(list) = try_request(self, "GET", "/v1/sandboxes?limit=100") else {
            return;
        };
        for id in ids(&list) {
            try_request(self, "DELETE", &format!("/v1/sandboxes/{id}"));
        }
    }
}

/// One bodiless request that reports failure instead of panicking.
fn try_request(or: &Or, method: &str, path: &str) -> Option<Value> {
    let mut conn = TcpStream::connect(or.server.addr).ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\
         authorization: Bearer {}\r\n\r\n",
        or.key
    );
    conn.write_all(head.as_bytes()).ok()?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).ok()?;
    let start = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    serde_json::from_slice(&raw[start..]).ok()
}

/// The same server with another key.
pub struct Or2<'a> {
    or: &'a Or,
    key: String,
}

impl Or2<'_> {
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        send(&self.or.server, &self.key, method, path, headers, body)
    }
}

fn send(
    server: &Server,
    key: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut all = vec![("authorization", format!("Bearer {key}"))];
    if !body.is_empty()
        && !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        all.push(("content-type", "application/json".into()));
    }
    all.extend(headers.iter().map(|(n, v)| (*n, v.to_string())));
    http(server.addr, method, path, &all, body)
}

pub fn ids(list: &Value) -> Vec<String> {
    list["sandboxes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["id"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The `code` of an error answer, after checking its status and shape.
pub fn code(r: &Reply, status: u16) -> String {
    let v = r.json();
    assert_eq!(r.status, status, "{}", r.text());
    assert!(v["error"].is_string() && v["requestId"].is_string(), "{v}");
    v["code"].as_str().unwrap_or_default().to_owned()
}

/// The JSON values of an NDJSON body, one per line.
pub fn lines(body: &[u8]) -> Vec<Value> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice(l)
                .unwrap_or_else(|e| panic!("bad line {:?}: {e}", String::from_utf8_lossy(l)))
        })
        .collect()
}

/// Checks NDJSON framing: first a sandbox event, seq increasing by one from `first`,
/// exactly one exit event, last.
pub fn check_framing(events: &[Value], first: u64) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(first + i as u64), "{events:?}");
    }
    if first == 0 {
        assert_eq!(events[0]["type"], "sandbox", "{events:?}");
    }
    let exits = events.iter().filter(|e| e["type"] == "exit").count();
    assert_eq!(exits, 1, "{events:?}");
    assert_eq!(
        events.last().map(|e| e["type"].clone()),
        Some("exit".into())
    );
}

/// Concatenated `data` of the events of one stream type.
pub fn output(events: &[Value], kind: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .filter_map(|e| e["data"].as_str())
        .collect()
}

/// A streamed response read as it arrives (chunked NDJSON, one event per chunk).
pub struct Stream {
    conn: TcpStream,
    raw: Vec<u8>,
}

impl Stream {
    pub fn open(or: &Or, path: &str, headers: &[(&str, &str)], body: &str) -> Stream {
        let mut conn = TcpStream::connect(or.server.addr).expect("connect");
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\
             authorization: Bearer {}\r\ncontent-type: application/json\r\naccept: application/x-ndjson\r\n",
            body.len(),
            or.key
        );
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        conn.write_all(head.as_bytes()).expect("send");
        conn.write_all(body.as_bytes()).expect("send body");
        Stream {
            conn,
            raw: Vec::new(),
        }
    }

    /// Reads until the body holds `n` events; returns them.
    pub fn events_until(&mut self, n: usize) -> Vec<Value> {
        loop {
            let got = self.events();
            if got.len() >= n {
                return got;
            }
            let mut buf = [0u8; 4096];
            let k = self.conn.read(&mut buf).expect("read stream");
            assert!(
                k > 0,
                "stream ended early: {}",
                String::from_utf8_lossy(&self.raw)
            );
            self.raw.extend_from_slice(&buf[..k]);
        }
    }

    /// Reads to the end; returns every event.
    pub fn finish(mut self) -> Vec<Value> {
        self.conn.read_to_end(&mut self.raw).expect("read rest");
        self.events()
    }

    /// Reads to the end `chunk` bytes at a time, pausing after each read; returns
    /// every event.
    pub fn finish_slowly(mut self, chunk: usize, pause: std::time::Duration) -> Vec<Value> {
        let mut buf = vec![0u8; chunk];
        loop {
            let mut got = 0;
            while got < chunk {
                let k = self.conn.read(&mut buf[got..]).expect("read stream");
                if k == 0 {
                    break;
                }
                got += k;
            }
            self.raw.extend_from_slice(&buf[..got]);
            if got < chunk {
                return self.events();
            }
            std::thread::sleep(pause);
        }
    }

    /// Events in what was read so far: each chunk holds one `{…}\n` line.
    fn events(&self) -> Vec<Value> {
        self.raw
            .split(|b| *b == b'\n')
            .filter_map(|piece| {
                let start = piece.windows(7).position(|w| w == b"{\"seq\":")?;
                serde_json::from_slice(&piece[start..]).ok()
            })
            .collect()
    }
}

/// `sandboxd keys create …` on the server's data dir; returns the key.
pub fn make_key(data: &Path, args: &[&str]) -> String {
    let mut all = vec!["keys", "create"];
    all.extend(args);
    all.extend(["--data-dir", data.to_str().expect("utf-8 path")]);
    String::from_utf8_lossy(&cli(&all, "").stdout)
        .trim()
        .to_owned()
}
