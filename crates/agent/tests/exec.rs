//! Captured exec: output, timeout killing the process group, output cap, confinement.

mod common;

use common::*;
use futures_util::StreamExt;
use sandboxd_agent::AgentConfig;
use sandboxd_agent_protocol::{ExecRequest, Frame};
use std::sync::Arc;
use std::time::Duration;

fn exec_req(script: &str, timeout_ms: u64, max_output_bytes: u64) -> ExecRequest {
    ExecRequest {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: None,
        cwd: None,
        timeout_ms,
        max_output_bytes,
        user: None,
    }
}

#[tokio::test]
async fn captures_both_streams_and_exit_code() {
    let agent = start().await;
    let r = agent
        .client
        .exec(&exec_req("printf 'out\\377'; printf err >&2; exit 4", 0, 0))
        .await
        .unwrap();
    assert_eq!(decode(&r.stdout), b"out\xff");
    assert_eq!(decode(&r.stderr), b"err");
    assert_eq!(
        (r.exit_code, r.signal, r.timed_out, r.output_truncated),
        (Some(4), None, false, false)
    );
    // Exec is not a managed process, but it feeds the sandbox log.
    assert!(agent.client.list_processes().await.unwrap().is_empty());
    let mut logs = agent.client.logs(false).await.unwrap();
    let mut bytes = Vec::new();
    while let Some(frame) = logs.next().await {
        if let Frame::Log { data, process, .. } = frame.unwrap() {
            assert!(process.is_some());
            bytes.extend(decode(&data));
        }
    }
    bytes.sort();
    let mut expected = b"out\xfferr".to_vec();
    expected.sort();
    assert_eq!(bytes, expected);
}

#[tokio::test]
async fn log_follow_receives_live_output_of_every_command() {
    let agent = start().await;
    let mut logs = agent.client.logs(true).await.unwrap();
    let r = agent
        .client
        .exec(&exec_req("printf live", 0, 0))
        .await
        .unwrap();
    assert_eq!(decode(&r.stdout), b"live");
    match logs.next().await {
        Some(Ok(Frame::Log { data, process, .. })) => {
            assert_eq!(decode(&data), b"live");
            assert!(process.is_some());
        }
        other => panic!("expected a live log frame, got {other:?}"),
    }
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let agent = start().await;
    let r = agent
        .client
        .exec(&exec_req("/bin/sleep 1000 & echo $!; wait", 300, 0))
        .await
        .unwrap();
    assert!(r.timed_out);
    assert_eq!((r.exit_code, r.signal), (None, Some(9)));
    let grandchild: i32 = String::from_utf8(decode(&r.stdout))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone_ok = gone(grandchild).await;
    if !gone_ok {
        kill(grandchild);
    }
    assert!(gone_ok, "the grandchild outlived the exec timeout");
}

#[tokio::test]
async fn output_past_the_cap_is_truncated_and_the_command_killed() {
    let agent = start().await;
    let r = agent
        .client
        .exec(&exec_req(
            "while :; do echo xxxxxxxxxxxxxxxx; done",
            0,
            1000,
        ))
        .await
        .unwrap();
    assert!(r.output_truncated);
    assert!(!r.timed_out);
    assert_eq!(decode(&r.stdout).len() + decode(&r.stderr).len(), 1000);
    assert_eq!(r.signal, Some(9));
}

#[tokio::test]
async fn children_are_confined_and_get_a_neutral_oom_score() {
    let prepared = sandboxd_confine::prepare().expect("prepare confinement");
    let config = AgentConfig {
        confine: Some(Arc::new(move || prepared.apply())),
        ..AgentConfig::default()
    };
    let agent = start_with(config).await;
    let script = "grep NoNewPrivs /proc/self/status; cat /proc/self/oom_score_adj; \
                  grep CapBnd /proc/self/status; unshare -U true || echo refused";
    let r = agent.client.exec(&exec_req(script, 0, 0)).await.unwrap();
    let out = String::from_utf8(decode(&r.stdout)).unwrap();
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.lines().any(|l| l == "0"), "{out}");
    // Docker's default set: bits 0,1,3,4,5,6,7,8,10,13,27,29,31 → 0xa80425fb
    assert!(out.contains("CapBnd:\t00000000a80425fb"), "{out}");
    assert!(out.contains("refused"), "{out}");
}

/// A serving agent reaps its commands on its own runtime's thread: the reaper's thread
/// is not woken per command (it looks once a second, a safety net), so an exit reaches
/// the exec's answer without a hop between threads.
#[tokio::test]
async fn a_serving_agent_reaps_its_commands_without_waking_the_reaper_thread() {
    let agent = start().await;
    let c = &agent.client;
    // The first command's exit: the reaper (thread and handler) exists by then.
    c.exec(&exec_req("exit 0", 0, 0)).await.unwrap();
    let reaper = reaper_thread();
    let before = switches(&reaper);
    let began = std::time::Instant::now();
    for _ in 0..50 {
        let r = c.exec(&exec_req("exit 7", 0, 0)).await.unwrap();
        assert_eq!(r.exit_code, Some(7));
    }
    let (woken, took) = (switches(&reaper) - before, began.elapsed());
    // Its once-a-second look over the time taken, and one more either side.
    let looks = took.as_secs() + 2;
    assert!(
        woken <= looks,
        "the reaper's thread ran {woken} times for 50 commands in {took:?}"
    );
    // Not a speed bound: exits that only the thread's once-a-second look delivered
    // (the runtime not reaping, the handler no longer waking the thread) would hold each
    // command up to a second, some 50 s in all; the 50 take well under one.
    assert!(
        took < Duration::from_secs(20),
        "50 commands took {took:?}: their exits waited for the reaper thread's look"
    );
}

/// `/proc/self/task/<tid>` of the process's `agent-reaper` thread.
fn reaper_thread() -> std::path::PathBuf {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|t| t.unwrap().path())
        .find(|t| std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.trim() == "agent-reaper"))
        .expect("the agent-reaper thread")
}

/// How many times thread `task` has given up its CPU (woken and run, then slept).
fn switches(task: &std::path::Path) -> u64 {
    let status = std::fs::read_to_string(task.join("status")).unwrap();
    status
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .map(|l| l.split_whitespace().last().unwrap().parse::<u64>().unwrap())
        .sum()
}
