//! Helpers of the monitoring tests: a `sandboxd serve` with its metrics listener on a
//! port of its own, its `/metrics` text, and that text parsed into samples.

#![allow(dead_code)]

use crate::serve_bin::{http, Server};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

pub const MASTER: &str = "signkey-test-00112233445566778899aabbccddeeff";

/// A server with metrics on a free loopback port; returns it and the metrics address.
pub fn start(dir: &Path, env: &[(&str, &str)]) -> (Server, SocketAddr) {
    let mut all = vec![("SANDBOXD_METRICS_LISTEN", "127.0.0.1:0")];
    all.extend_from_slice(env);
    let server = Server::start_with_env(dir, Some(MASTER), &all);
    let line = server.wait_for_line(|l| l.contains("metrics at http://"));
    let addr = line
        .split("metrics at http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no metrics address in {line:?}"));
    (server, addr)
}

/// `GET /metrics`: its content type and text.
pub fn scrape(addr: SocketAddr) -> (String, String) {
    let reply = http(addr, "GET", "/metrics", &[], "");
    assert_eq!(reply.status, 200, "{}", reply.text());
    let kind = reply.header("content-type").unwrap_or_default().to_owned();
    (kind, reply.text())
}

/// One sample: its name and labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Series {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// Every sample of an exposition with its value.
pub fn samples(text: &str) -> Vec<(Series, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("sample value");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            let value = value.parse().unwrap_or(f64::NAN);
            (
                Series {
                    name: name.to_owned(),
                    labels,
                },
                value,
            )
        })
        .collect()
}

fn parse_labels(raw: &str) -> BTreeMap<String, String> {
    // Label values here never hold `",` (route templates, words, numbers).
    raw.split("\",")
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once("=\"").expect("label pair");
            (k.to_owned(), v.trim_end_matches('"').to_owned())
        })
        .collect()
}

/// The value of the sample named `name` whose labels include `labels` (0 if none).
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text)
        .into_iter()
        .filter(|(s, _)| s.name == name)
        .filter(|(s, _)| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
        .sum()
}

/// Every metric name a query may use: the samples' names and, from `# TYPE` lines,
/// each family's sample names (`_total` of counters, `_bucket`/`_sum`/`_count` of
/// histograms) whether or not it has samples yet.
pub fn queryable_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names: std::collections::BTreeSet<String> =
        samples(text).into_iter().map(|(s, _)| s.name).collect();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                names.insert(match name.ends_with("_total") {
                    true => name.to_owned(),
                    false => format!("{name}_total"),
                });
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

/// Deletes the sandboxes it was told of when dropped, even when a test fails midway
/// (a stopped server leaves its sandboxes running). Declare it after the server.
pub struct Reaper {
    addr: SocketAddr,
    ids: std::cell::RefCell<Vec<String>>,
}

impl Reaper {
    pub fn new(server: &Server) -> Reaper {
        Reaper {
            addr: server.addr,
            ids: Default::default(),
        }
    }

    /// Remembers `id` and hands it back.
    pub fn keep(&self, id: String) -> String {
        self.ids.borrow_mut().push(id.clone());
        id
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        let auth = [("authorization", format!("Bearer {MASTER}"))];
        for id in self.ids.borrow().iter() {
            if std::net::TcpStream::connect(self.addr).is_ok() {
                http(
                    self.addr,
                    "DELETE",
                    &format!("/v2/sandboxes/{id}"),
                    &auth,
                    "",
                );
            }
        }
        // DELETE answers once the sandbox is TERMINATING: wait for each to end.
        for id in self.ids.borrow().iter() {
            for _ in 0..600 {
                if std::net::TcpStream::connect(self.addr).is_err() {
                    break;
                }
                let got = http(self.addr, "GET", &format!("/v2/sandboxes/{id}"), &auth, "");
                let status = got.json()["data"]["status"].clone();
                if status != "TERMINATING" && status != "RUNNING" {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}
