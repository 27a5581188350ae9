//! Every invalid argument is answered with a typed error, never a panic.

mod common;

use common::*;
use sandboxd_agent_protocol::{AgentErrorCode, ExecRequest, SignalRequest};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

#[tokio::test]
async fn bad_commands_are_invalid_arguments() {
    let agent = start().await;
    let c = &agent.client;
    let env = |k: &str, v: &str| Some([(k.to_string(), v.to_string())].into());
    let mut cases = vec![
        process(&[]),
        process(&["sh", "-c", "true"]),
        process(&["/bin/echo", "a\0b"]),
    ];
    cases.push(StartProcess {
        env: env("", "x"),
        ..process(&["/bin/true"])
    });
    cases.push(StartProcess {
        env: env("A=B", "x"),
        ..process(&["/bin/true"])
    });
    cases.push(StartProcess {
        env: env("A\0", "x"),
        ..process(&["/bin/true"])
    });
    cases.push(StartProcess {
        env: env("A", "x\0y"),
        ..process(&["/bin/true"])
    });
    cases.push(StartProcess {
        cwd: Some("tmp".into()),
        ..process(&["/bin/true"])
    });
    cases.push(StartProcess {
        cwd: Some("/no/such/dir".into()),
        ..process(&["/bin/true"])
    });
    cases.push(StartProcess {
        cwd: Some("/tmp\0".into()),
        ..process(&["/bin/true"])
    });
    for req in &cases {
        assert_eq!(
            code(c.start_process(req).await),
            AgentErrorCode::InvalidArgument,
            "{req:?}"
        );
        let exec = ExecRequest {
            argv: req.argv.clone(),
            env: req.env.clone(),
            cwd: req.cwd.clone(),
            timeout_ms: 0,
            max_output_bytes: 0,
            user: None,
        };
        assert_eq!(
            code(c.exec(&exec).await),
            AgentErrorCode::InvalidArgument,
            "{req:?}"
        );
    }
    assert!(c.list_processes().await.unwrap().is_empty());
    let missing = process(&["/no/such/binary"]);
    assert_eq!(
        code(c.start_process(&missing).await),
        AgentErrorCode::SpawnFailed
    );
}

use sandboxd_agent_protocol::StartProcess;

#[tokio::test]
async fn bad_ids_and_signals_are_typed_errors() {
    let agent = start().await;
    let c = &agent.client;
    let nobody = Uuid::new_v4();
    assert_eq!(
        code(c.get_process(nobody).await),
        AgentErrorCode::ProcessNotFound
    );
    assert_eq!(
        code(c.wait(nobody, Duration::from_millis(1)).await),
        AgentErrorCode::ProcessNotFound
    );
    assert_eq!(
        code(c.output(nobody, 0, true).await),
        AgentErrorCode::ProcessNotFound
    );
    let sig = SignalRequest {
        signal: 9,
        group: false,
    };
    assert_eq!(
        code(c.signal(nobody, &sig).await),
        AgentErrorCode::ProcessNotFound
    );

    let p = c
        .start_process(&process(&["/bin/sleep", "1000"]))
        .await
        .unwrap();
    assert_eq!(
        code(
            c.start_process(&StartProcess {
                id: p.id,
                ..process(&["/bin/true"])
            })
            .await
        ),
        AgentErrorCode::ProcessExists
    );
    for signal in [0, -1, 65, 1000] {
        let r = c
            .signal(
                p.id,
                &SignalRequest {
                    signal,
                    group: false,
                },
            )
            .await;
        assert_eq!(code(r), AgentErrorCode::InvalidArgument, "signal {signal}");
    }
    c.signal(
        p.id,
        &SignalRequest {
            signal: 9,
            group: true,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        c.wait(p.id, Duration::from_secs(60)).await.unwrap().signal,
        Some(9)
    );
}

/// Sends a raw HTTP request and returns the status line and body.
async fn raw(agent: &TestAgent, request: &str) -> (String, String) {
    let mut s = tokio::net::UnixStream::connect(agent.client.socket())
        .await
        .unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out.lines().next().unwrap_or("").to_owned();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

#[tokio::test]
async fn malformed_requests_get_json_errors() {
    let agent = start().await;
    let cases = [
        "GET /v1/processes/not-a-uuid HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "GET /v1/nowhere HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "GET /v1/files?path=%zz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "GET /v1/files HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "GET /v1/logs?follow=maybe HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "POST /v1/processes HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: close\r\n\r\n{nope",
        "POST /v1/exec HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        "POST /v1/processes/00000000-0000-0000-0000-000000000000/wait?timeout_ms=x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    ];
    for req in cases {
        let (status, body) = raw(&agent, req).await;
        assert!(status.contains(" 400 "), "{req:?} → {status}");
        assert!(
            body.contains("\"code\":\"invalid_argument\""),
            "{req:?} → {body}"
        );
    }
    // The agent is still healthy afterwards.
    agent.client.health().await.unwrap();
}
