//! A start and its follow in one exchange, through a counting relay in front of a real
//! agent: the stream rides a kept connection and leaves it kept, and an agent of an
//! earlier build (one that ignores `follow` on a start) is still followed whole, or,
//! when its follow is refused, leaves nothing running (as a refused exchange does).

mod common;

use common::*;
use futures_util::StreamExt;
use sandboxd_agent_protocol::{AgentClient, ClientError, Frame, StartProcess};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// A relay on its own socket to the agent's, counting the connections it accepts;
/// every `(pattern, with)` of `rewrites` is replaced in the requests on their way
/// (`?follow=true` cut out: the agent then answers as a build without the one-exchange
/// start did).
struct Relay {
    socket: PathBuf,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    fn start(
        dir: &Path,
        agent: &Path,
        rewrites: &'static [(&'static [u8], &'static [u8])],
    ) -> Relay {
        let socket = dir.join("relay.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let (count, agent) = (connections.clone(), agent.to_owned());
        let task = tokio::spawn(async move {
            let mut pipes = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let agent = agent.clone();
                pipes.spawn(async move {
                    let upstream = UnixStream::connect(&agent).await.unwrap();
                    let (mut client_r, client_w) = client.into_split();
                    let (mut up_r, mut up_w) = upstream.into_split();
                    let answers = tokio::spawn(async move {
                        let mut client_w = client_w;
                        let _ = tokio::io::copy(&mut up_r, &mut client_w).await;
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = client_r.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let mut chunk = buf[..n].to_vec();
                        for (pattern, with) in rewrites {
                            chunk = replace(&chunk, pattern, with);
                        }
                        if up_w.write_all(&chunk).await.is_err() {
                            break;
                        }
                    }
                    drop(up_w);
                    let _ = answers.await;
                });
            }
        });
        Relay {
            socket,
            connections,
            task,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The agent as a build without the one-exchange start answers.
const EARLIER_AGENT: &[(&[u8], &[u8])] = &[(b"?follow=true", b"")];

/// `data` with every `pattern` replaced by `with`.
fn replace(data: &[u8], pattern: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        if data[i..].starts_with(pattern) {
            out.extend_from_slice(with);
            i += pattern.len();
        } else {
            out.push(data[i]);
            i += 1;
        }
    }
    out
}

/// Every frame of a stream, each one a success.
async fn all(frames: sandboxd_agent_protocol::FrameStream) -> Vec<Frame> {
    frames.map(Result::unwrap).collect().await
}

/// The output bytes of `frames` and the exit code their `Exit` (the last) reports.
fn output_and_code(frames: &[Frame]) -> (Vec<u8>, Option<i32>) {
    let mut out = Vec::new();
    for f in frames {
        if let Frame::Log { data, .. } = f {
            out.extend(decode(data));
        }
    }
    let code = match frames.last() {
        Some(Frame::Exit { info }) => info.exit_code,
        other => panic!("the stream must end with Exit, not {other:?}"),
    };
    (out, code)
}

#[tokio::test]
async fn a_followed_start_rides_the_kept_connection_and_leaves_it_kept() {
    let agent = start().await;
    let relay = Relay::start(agent.dir.path(), agent.client.socket(), &[]);
    let client = AgentClient::new(&relay.socket);
    client.health().await.unwrap();
    assert_eq!(relay.connections(), 1);
    for i in 0..3 {
        let req = StartProcess {
            hold_output: true,
            ..sh(&format!("echo run {i}; exit {i}"))
        };
        let frames = all(client.start_following(&req).await.unwrap()).await;
        assert_eq!(
            output_and_code(&frames),
            (format!("run {i}\n").into_bytes(), Some(i))
        );
        // The body's end after `Exit` is read on a task of its own: let it run.
        tokio::time::sleep(Duration::from_millis(50)).await;
        client.health().await.unwrap();
    }
    assert_eq!(
        relay.connections(),
        1,
        "every start, its stream and the calls between went on one kept connection"
    );
}

#[tokio::test]
async fn an_earlier_agent_that_answers_the_start_alone_is_followed_whole() {
    let agent = start_with(sandboxd_agent::AgentConfig {
        ring_bytes: 64 * 1024,
        ..sandboxd_agent::AgentConfig::default()
    })
    .await;
    let relay = Relay::start(agent.dir.path(), agent.client.socket(), EARLIER_AGENT);
    let client = AgentClient::new(&relay.socket);
    let req = StartProcess {
        hold_output: true,
        ..sh("seq 1 100000; exit 7")
    };
    let frames = all(client.start_following(&req).await.unwrap()).await;
    let want: String = (1..=100000).map(|i| format!("{i}\n")).collect();
    let (out, code) = output_and_code(&frames);
    assert_eq!(code, Some(7));
    assert!(
        out == want.as_bytes(),
        "got {} bytes of {}",
        out.len(),
        want.len()
    );
    assert!(
        frames.iter().all(|f| !matches!(f, Frame::Gap { .. })),
        "the holder's stream has no gap"
    );
    // It went as a start, then a follow of its own.
    assert_eq!(relay.connections(), 2);
}

#[tokio::test]
async fn an_earlier_agent_whose_follow_is_refused_leaves_nothing_running() {
    let agent = start().await;
    // The follow's `from` made unreadable: the earlier agent refuses it.
    const REFUSED_FOLLOW: &[(&[u8], &[u8])] =
        &[(b"?follow=true", b""), (b"output?from=0", b"output?from=z")];
    let relay = Relay::start(agent.dir.path(), agent.client.socket(), REFUSED_FOLLOW);
    let client = AgentClient::new(&relay.socket);
    let req = StartProcess {
        hold_output: true,
        ..sh("sleep 30")
    };
    let refused = client.start_following(&req).await.err();
    assert!(
        matches!(refused, Some(ClientError::Agent(_))),
        "a typed refusal, not {refused:?}"
    );
    // A typed refusal of the exchange means nothing runs on: the engine sends no kill.
    let info = agent.client.wait(req.id, Duration::from_secs(5)).await;
    let info = info.expect("the started process is ended");
    assert_eq!(info.signal, Some(9), "{info:?}");
}

/// The fallback's kill is refused too: the process still runs, so the answer is no
/// typed refusal (a caller trusts one to leave nothing), and the caller's own kill
/// ends it.
#[tokio::test]
async fn an_earlier_agent_whose_follow_and_kill_are_refused_answers_no_typed_refusal() {
    let agent = start().await;
    // The follow's `from` made unreadable, and the kill's signal 0 (outside 1..=64).
    const REFUSED_BOTH: &[(&[u8], &[u8])] = &[
        (b"?follow=true", b""),
        (b"output?from=0", b"output?from=z"),
        (b"\"signal\":9,", b"\"signal\":0,"),
    ];
    let relay = Relay::start(agent.dir.path(), agent.client.socket(), REFUSED_BOTH);
    let client = AgentClient::new(&relay.socket);
    let req = StartProcess {
        hold_output: true,
        ..sh("sleep 30")
    };
    let failed = client.start_following(&req).await.err();
    assert!(
        matches!(failed, Some(ref e) if !matches!(e, ClientError::Agent(_))),
        "an error that is no typed refusal, not {failed:?}"
    );
    let running = agent.client.list_processes().await.expect("list");
    let still = running.iter().find(|p| p.id == req.id).expect("listed");
    assert!(
        still.exit_code.is_none() && still.signal.is_none(),
        "{still:?}"
    );
    let kill = sandboxd_agent_protocol::SignalRequest {
        signal: 9,
        group: true,
    };
    agent.client.signal(req.id, &kill).await.expect("kill");
    let info = agent.client.wait(req.id, Duration::from_secs(5)).await;
    assert_eq!(info.expect("ended").signal, Some(9));
}
