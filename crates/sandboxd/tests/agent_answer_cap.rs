//! An agent that answers without end (on the gVisor tier a tenant can put its own
//! listener at the agent's socket; here the test does so on the host) costs the server
//! a bounded read: a process list answers the dialect's 503 `unavailable` after at
//! most the answer cap, and the sandbox works again once its agent is back.

mod common;
mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const MASTER: &str = "agent-answer-cap-test-master-key-0123456789";
/// The server's cap on an answer read whole (agent-protocol's `MAX_ANSWER_BYTES`).
const CAP: u64 = 16 << 20;
/// What the server may have read past the cap before it stopped (buffers).
const SLACK: u64 = 4 << 20;
/// A fake connection stops on its own after this much (so an uncapped server ends).
const BUDGET: u64 = 64 << 20;

/// The agent socket's path, from the sandbox's handle file.
fn agent_socket(data: &Path, id: &str) -> PathBuf {
    let file = data.join("sandboxes").join(id).join("handle.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    let handle: serde_json::Value = serde_json::from_str(&text).expect("handle json");
    PathBuf::from(handle["agent_socket"].as_str().expect("agent_socket"))
}

/// Answers each request `200` with an endless chunked body; records the body bytes
/// written on each connection before the peer hung up (or `BUDGET` ran out).
fn fake_agent(listener: UnixListener, sent: Arc<Mutex<Vec<u64>>>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { return };
        let sent = sent.clone();
        std::thread::spawn(move || {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                          transfer-encoding: chunked\r\n\r\n";
            if stream.write_all(answer.as_bytes()).is_err() {
                return;
            }
            let mut chunk = format!("{:x}\r\n", 64 * 1024).into_bytes();
            chunk.extend(std::iter::repeat_n(b'a', 64 * 1024));
            chunk.extend_from_slice(b"\r\n");
            let mut n = 0u64;
            while n < BUDGET && stream.write_all(&chunk).is_ok() {
                n += chunk.len() as u64;
            }
            let _ = stream.write_all(b"0\r\n\r\n");
            sent.lock().unwrap().push(n);
        });
    }
}

#[test]
fn an_endless_agent_answer_is_cut_at_the_cap_and_answers_unavailable() {
    let data_tmp = tempfile::tempdir().expect("tempdir");
    let data = data_tmp.path().canonicalize().expect("canonical");
    let server = Server::start(&data, Some(MASTER));
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "endless", "vcpu": 1, "memoryMb": 128}),
    );
    let socket = agent_socket(&data, &id);
    let real = socket.with_extension("real");
    std::fs::rename(&socket, &real).expect("move the agent's socket");
    let listener = UnixListener::bind(&socket).expect("bind the fake");
    let sent = Arc::new(Mutex::new(Vec::new()));
    let fake = {
        let sent = sent.clone();
        std::thread::spawn(move || fake_agent(listener, sent))
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Several at once: kept connections to the real agent serve a few, the rest
        // connect anew and reach the fake.
        let path = format!("/v2/sandboxes/{id}/processes");
        let lists: Vec<_> = (0..6)
            .map(|_| {
                let (addr, path) = (server.addr, path.clone());
                std::thread::spawn(move || {
                    let headers = [("authorization", format!("Bearer {MASTER}"))];
                    let reply = serve_bin::try_http(addr, "GET", &path, &headers, "");
                    reply.map(|r| (r.status, r.text())).expect("an answer")
                })
            })
            .collect();
        let answers: Vec<(u16, String)> = lists.into_iter().map(|t| t.join().unwrap()).collect();
        let refused: Vec<&String> = answers
            .iter()
            .filter(|(status, _)| *status != 200)
            .map(|(_, body)| body)
            .collect();
        assert!(!refused.is_empty(), "{answers:?}");
        for (status, body) in &answers {
            assert!(*status == 200 || *status == 503, "{status}: {body}");
        }
        for body in &refused {
            assert!(body.contains("larger than"), "{body}");
        }
        // A fake connection records its count once a write fails, after the server
        // hung up on it (that is, after the 503 may already be here): waited for.
        common::wait_for("the fake recorded each refused answer's count", || {
            sent.lock().unwrap().len() >= refused.len()
        });
        let sent = sent.lock().unwrap().clone();
        assert!(!sent.is_empty(), "the fake got no request");
        for n in &sent {
            assert!(*n <= CAP + SLACK, "the server read {n} bytes of one answer");
        }
    }));
    // Put the real agent back: the fake's accept loop ends on the next connection.
    let _ = UnixStream::connect(&socket).map(|s| s.shutdown(std::net::Shutdown::Both));
    let _ = std::fs::remove_file(&socket);
    std::fs::rename(&real, &socket).expect("restore the agent's socket");
    drop(fake);
    if outcome.is_ok() {
        let (code, out) = server.exec(MASTER, &id, &["/bin/echo", "back"]);
        assert_eq!((code, out.trim()), (0, "back"), "the sandbox works again");
    }
    server.destroy(MASTER, &id);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
