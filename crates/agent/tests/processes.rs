//! Managed processes through the client: exit states, signals, output rings and follow.

mod common;

use common::*;
use futures_util::StreamExt;
use sandboxd_agent::AgentConfig;
use sandboxd_agent_protocol::{
    AgentErrorCode, ClientError, Frame, ProcessState, SignalRequest, StartProcess, StreamKind,
};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

#[tokio::test]
async fn health_reports_protocol_and_pid() {
    let agent = start().await;
    let h = agent.client.health().await.unwrap();
    assert_eq!(h.protocol, sandboxd_agent_protocol::PROTOCOL_VERSION);
    assert_eq!(h.pid, std::process::id());
}

#[tokio::test]
async fn exit_code_and_kill_signal_are_reported() {
    let agent = start().await;
    let c = &agent.client;
    let p = c.start_process(&sh("exit 3")).await.unwrap();
    assert_eq!(p.state, ProcessState::Running);
    let done = c.wait(p.id, LONG).await.unwrap();
    assert_eq!(
        (done.state, done.exit_code, done.signal),
        (ProcessState::Exited, Some(3), None)
    );
    assert!(done.ended_at.is_some());

    let p = c
        .start_process(&process(&["/bin/sleep", "1000"]))
        .await
        .unwrap();
    c.signal(
        p.id,
        &SignalRequest {
            signal: 9,
            group: false,
        },
    )
    .await
    .unwrap();
    let done = c.wait(p.id, LONG).await.unwrap();
    assert_eq!(
        (done.state, done.exit_code, done.signal),
        (ProcessState::Killed, None, Some(9))
    );
    // A terminal process accepts a signal as a no-op.
    c.signal(
        p.id,
        &SignalRequest {
            signal: 15,
            group: true,
        },
    )
    .await
    .unwrap();
    let listed = c.list_processes().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.windows(2).all(|w| w[0].id < w[1].id));
}

#[tokio::test]
async fn wait_timeout_leaves_the_process_running() {
    let agent = start().await;
    let c = &agent.client;
    let p = c
        .start_process(&process(&["/bin/sleep", "1000"]))
        .await
        .unwrap();
    assert_eq!(
        code(c.wait(p.id, Duration::from_millis(50)).await),
        AgentErrorCode::WaitTimedOut
    );
    assert_eq!(
        c.get_process(p.id).await.unwrap().state,
        ProcessState::Running
    );
    kill(p.pid as i32);
    assert_eq!(c.wait(p.id, LONG).await.unwrap().signal, Some(9));
}

#[tokio::test]
async fn group_signal_reaches_the_child_of_the_process() {
    let agent = start().await;
    let c = &agent.client;
    let p = c
        .start_process(&sh("/bin/sleep 1000 & echo $!; wait"))
        .await
        .unwrap();
    let mut follow = c.output(p.id, 0, true).await.unwrap();
    let grandchild: i32 = match follow.next().await {
        Some(Ok(Frame::Log { data, .. })) => String::from_utf8(decode(&data))
            .unwrap()
            .trim()
            .parse()
            .unwrap(),
        other => panic!("expected the child's pid, got {other:?}"),
    };
    c.signal(
        p.id,
        &SignalRequest {
            signal: 15,
            group: true,
        },
    )
    .await
    .unwrap();
    let done = c.wait(p.id, LONG).await.unwrap();
    assert_eq!((done.state, done.signal), (ProcessState::Killed, Some(15)));
    let gone_ok = gone(grandchild).await;
    if !gone_ok {
        kill(grandchild);
    }
    assert!(gone_ok, "the grandchild survived a group signal");
}

/// Writes three chunks (stdout, stderr, stdout) with a handshake in between, so that
/// the agent reads them one by one; the bytes are not UTF-8 and contain NUL.
#[tokio::test]
async fn follow_sees_live_chunks_in_order_then_exit_and_tail_picks_whole_chunks() {
    let agent = start().await;
    let c = &agent.client;
    let go1 = agent.dir.path().join("go1");
    let go2 = agent.dir.path().join("go2");
    let script = format!(
        "printf '\\377\\000A'; {a}; printf '\\376B' >&2; {b}; printf CCCC; exit 5",
        a = wait_for_file(&go1),
        b = wait_for_file(&go2)
    );
    let p = c.start_process(&sh(&script)).await.unwrap();
    let mut follow = c.output(p.id, 0, true).await.unwrap();
    let mut seen = Vec::new();
    let mut exit = None;
    while let Some(frame) = follow.next().await {
        match frame.unwrap() {
            Frame::Log {
                stream,
                data,
                process,
                ..
            } => {
                assert_eq!(process, None);
                seen.push((stream, decode(&data)));
                match seen.len() {
                    1 => std::fs::write(&go1, b"").unwrap(),
                    2 => std::fs::write(&go2, b"").unwrap(),
                    _ => {}
                }
            }
            Frame::Exit { info } => exit = Some(info),
            other => panic!("unexpected frame {other:?}"),
        }
    }
    let expected = vec![
        (StreamKind::Stdout, b"\xff\x00A".to_vec()),
        (StreamKind::Stderr, b"\xfeB".to_vec()),
        (StreamKind::Stdout, b"CCCC".to_vec()),
    ];
    assert_eq!(seen, expected);
    assert_eq!(
        exit.map(|i| (i.state, i.exit_code)),
        Some((ProcessState::Exited, Some(5)))
    );

    assert_eq!(chunks(c, p.id, 0).await, expected);
    assert_eq!(chunks(c, p.id, 6).await, expected[1..].to_vec());
    assert_eq!(chunks(c, p.id, 5).await, expected[2..].to_vec());
    // The newest chunk alone exceeds the limit: it is returned whole, alone.
    assert_eq!(chunks(c, p.id, 3).await, expected[2..].to_vec());

    // The sandbox log has the same chunks, tagged with the process.
    let mut logs = c.logs(false).await.unwrap();
    let mut tagged = 0;
    while let Some(frame) = logs.next().await {
        if let Frame::Log {
            process: Some(id), ..
        } = frame.unwrap()
        {
            assert_eq!(id, p.id);
            tagged += 1;
        }
    }
    assert_eq!(tagged, 3);
}

#[tokio::test]
async fn only_the_newest_32_rings_are_retained() {
    let agent = start().await;
    let c = &agent.client;
    let mut ids = Vec::new();
    for i in 0..33 {
        let p = c.start_process(&sh(&format!("echo {i}"))).await.unwrap();
        c.wait(p.id, LONG).await.unwrap();
        ids.push(p.id);
    }
    assert_eq!(
        code(c.output(ids[0], 0, false).await),
        AgentErrorCode::OutputNotRetained
    );
    let first = c.get_process(ids[0]).await.unwrap();
    assert!(!first.output_retained);
    assert_eq!(first.exit_code, Some(0));
    assert_eq!(
        chunks(c, ids[1], 0).await,
        vec![(StreamKind::Stdout, b"1\n".to_vec())]
    );
    assert_eq!(
        chunks(c, ids[32], 0).await,
        vec![(StreamKind::Stdout, b"32\n".to_vec())]
    );
    assert_eq!(c.list_processes().await.unwrap().len(), 33);
}

#[tokio::test]
async fn environment_and_cwd_are_applied() {
    let agent = start().await;
    let c = &agent.client;
    let p = c
        .start_process(&sh("echo \"$HOME:$LANG:$(pwd)\""))
        .await
        .unwrap();
    c.wait(p.id, LONG).await.unwrap();
    assert_eq!(chunks(c, p.id, 0).await[0].1, b"/root:C.UTF-8:/\n");
    let mut req = sh("echo \"$FOO:${HOME:-none}:$(pwd)\"");
    req.env = Some([("FOO".to_string(), "bar baz".to_string())].into());
    req.cwd = Some("/tmp".into());
    let p = c.start_process(&req).await.unwrap();
    c.wait(p.id, LONG).await.unwrap();
    assert_eq!(chunks(c, p.id, 0).await[0].1, b"bar baz:none:/tmp\n");
}

#[tokio::test]
async fn a_follower_that_does_not_read_never_blocks_the_process_and_is_told_of_the_gap() {
    let agent = start().await;
    let c = &agent.client;
    // The command writes only once the follower is open: a follower opened after a fast
    // command ended (a loaded machine) would start at the retained tail, with no gap.
    let gate = agent.dir.path().join("go");
    let p = c
        .start_process(&sh(&format!(
            "{}; head -c 20000000 /dev/zero",
            wait_for_file(&gate)
        )))
        .await
        .unwrap();
    let mut follow = c.output(p.id, 0, true).await.unwrap();
    std::fs::write(&gate, b"").unwrap();
    // The follower reads nothing while 20 MB go through the agent.
    let done = c.wait(p.id, LONG).await.unwrap();
    assert_eq!(done.exit_code, Some(0));
    let (mut next, mut read, mut dropped, mut exited) = (None::<u64>, 0u64, 0u64, false);
    while let Some(frame) = follow.next().await {
        match frame.unwrap() {
            Frame::Log { data, offset, .. } => {
                // Every chunk starts where the stream stood: no silent hole.
                assert!(next.is_none_or(|n| n == offset), "{next:?} != {offset}");
                let len = decode(&data).len() as u64;
                next = Some(offset + len);
                read += len;
            }
            Frame::Gap { from, to } => {
                assert!(next.is_none_or(|n| n == from) && to > from);
                dropped += to - from;
                next = Some(to);
            }
            Frame::Exit { .. } => exited = true,
            f => panic!("unexpected {f:?}"),
        }
    }
    assert!(
        dropped > 0,
        "a stalled follower must be told what it missed"
    );
    // Read and told-of bytes add up to everything from where the stream began.
    assert_eq!(next, Some(20_000_000));
    assert!(read > 0 && read < 20_000_000);
    assert!(exited);
}

#[tokio::test]
async fn a_held_process_waits_for_its_slow_holder_and_loses_nothing() {
    let (agent, req, want) = small_rings_and_a_held_writer().await;
    let c = &agent.client;
    let p = c.start_process(&req).await.unwrap();
    let follow = c.output_from(p.id, 0, true).await.unwrap();
    read_slowly_as_holder(follow, want.as_bytes()).await;
    // Reading from an offset the ring no longer holds says where it starts now.
    let mut from_zero = c.output_from(p.id, 0, false).await.unwrap();
    match from_zero.next().await.unwrap().unwrap() {
        Frame::Gap { from: 0, to } => assert!(to > 0 && to < want.len() as u64),
        f => panic!("expected a gap first, got {f:?}"),
    }
}

/// An agent with 64 KiB rings, a held command writing ~30 of them, and its output.
async fn small_rings_and_a_held_writer() -> (TestAgent, StartProcess, String) {
    let agent = start_with(AgentConfig {
        ring_bytes: 64 * 1024,
        ..AgentConfig::default()
    })
    .await;
    let req = StartProcess {
        hold_output: true,
        ..sh("seq 1 300000")
    };
    let want = (1..=300000).map(|i| format!("{i}\n")).collect();
    (agent, req, want)
}

/// Reads a holder's stream slowly (a pause every 8 chunks): every byte of `want`, in
/// order and without a gap, then the `Exit` of a command that exited 0.
async fn read_slowly_as_holder(mut follow: sandboxd_agent_protocol::FrameStream, want: &[u8]) {
    let (mut out, mut exited, mut reads) = (Vec::new(), false, 0u32);
    while let Some(frame) = follow.next().await {
        match frame.unwrap() {
            Frame::Log { data, offset, .. } => {
                assert_eq!(offset, out.len() as u64);
                out.extend(decode(&data));
                reads += 1;
                if reads % 8 == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            Frame::Exit { info } => {
                exited = true;
                assert_eq!(info.exit_code, Some(0));
            }
            f => panic!("a holder never sees {f:?}"),
        }
    }
    assert!(exited);
    assert!(out == want, "got {} bytes of {}", out.len(), want.len());
}

#[tokio::test]
async fn a_start_followed_in_one_exchange_loses_nothing_to_its_slow_holder() {
    let (agent, req, want) = small_rings_and_a_held_writer().await;
    let c = &agent.client;
    let follow = c.start_following(&req).await.unwrap();
    read_slowly_as_holder(follow, want.as_bytes()).await;
    let done = c.get_process(req.id).await.unwrap();
    assert_eq!(done.state, ProcessState::Exited);
}

#[tokio::test]
async fn a_start_followed_that_fails_answers_its_error_and_leaves_nothing() {
    let agent = start().await;
    let c = &agent.client;
    let missing = StartProcess {
        hold_output: true,
        ..process(&["/nonexistent/binary"])
    };
    let err = c
        .start_following(&missing)
        .await
        .err()
        .expect("a failed start");
    assert!(matches!(err, ClientError::Agent(_)), "{err:?}");
    let relative = StartProcess {
        hold_output: true,
        ..process(&["true"])
    };
    assert_eq!(
        code(c.start_following(&relative).await),
        AgentErrorCode::InvalidArgument
    );
    assert!(c.list_processes().await.unwrap().is_empty());
    // The connection the failures came back on serves the next start.
    let ok = c.start_following(&sh("exit 0")).await.unwrap();
    let frames: Vec<Frame> = ok.map(Result::unwrap).collect().await;
    assert!(
        matches!(frames.last(), Some(Frame::Exit { .. })),
        "{frames:?}"
    );
}
