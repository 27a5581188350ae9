//! A process list's size is bounded however many processes ran and however long their
//! command lines were: the agent keeps a bounded prefix of each command line and
//! forgets the oldest ended processes past its cap.

mod common;

use common::{code, process, start, start_with};
use sandboxd_agent::AgentConfig;
use sandboxd_agent_protocol::limits::{KEPT_ARGS, KEPT_ARGV_BYTES};
use sandboxd_agent_protocol::AgentErrorCode;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

/// What one listed process may take in JSON at most: its kept command line with every
/// byte escaped (`\u00XX`), quotes and commas, and the other fields.
const ENTRY_JSON_MAX: usize = KEPT_ARGV_BYTES * 6 + KEPT_ARGS * 3 + 1024;

#[tokio::test]
async fn processes_with_huge_command_lines_list_in_bounded_size() {
    let agent = start().await;
    let c = &agent.client;
    // The review's shape: 7 arguments of 120 KB each (840 KB a process), 40 processes
    // (34 MB of command lines if kept whole).
    let big = "x".repeat(120 * 1024);
    let mut argv = vec!["/bin/true"];
    argv.extend(std::iter::repeat_n(big.as_str(), 7));
    let n = 40;
    for _ in 0..n {
        let p = c.start_process(&process(&argv)).await.unwrap();
        assert_eq!(p.argv[0], "/bin/true");
        let ended = c.wait(p.id, LONG).await.unwrap();
        assert_eq!(
            ended.exit_code,
            Some(0),
            "it ran with its whole command line"
        );
    }
    let listed = c.list_processes().await.unwrap();
    assert_eq!(listed.len(), n);
    let json = serde_json::to_vec(&listed).unwrap().len();
    assert!(json <= n * ENTRY_JSON_MAX, "{json} bytes for {n} processes");
    for p in &listed {
        let kept: usize = p.argv.iter().map(String::len).sum();
        assert!(kept <= KEPT_ARGV_BYTES && p.argv_truncated, "{kept}");
    }
}

#[tokio::test]
async fn the_oldest_ended_processes_are_forgotten_past_the_cap() {
    let agent = start_with(AgentConfig {
        max_ended: 8,
        ..AgentConfig::default()
    })
    .await;
    let c = &agent.client;
    let running = c
        .start_process(&process(&["/bin/sleep", "60"]))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..20 {
        let p = c.start_process(&process(&["/bin/true"])).await.unwrap();
        c.wait(p.id, LONG).await.unwrap();
        ids.push(p.id);
    }
    let listed = c.list_processes().await.unwrap();
    assert_eq!(listed.len(), 9, "the running one and the newest 8 ended");
    assert!(listed.iter().any(|p| p.id == running.id));
    for old in &ids[..12] {
        assert_eq!(
            code(c.get_process(*old).await),
            AgentErrorCode::ProcessNotFound
        );
    }
    assert_eq!(c.get_process(ids[19]).await.unwrap().exit_code, Some(0));
    let req = sandboxd_agent_protocol::SignalRequest {
        signal: 9,
        group: false,
    };
    c.signal(running.id, &req).await.unwrap();
    c.wait(running.id, LONG).await.unwrap();
}

#[tokio::test]
async fn a_list_page_holds_only_the_processes_asked_for() {
    let agent = start().await;
    let c = &agent.client;
    for _ in 0..7 {
        let p = c.start_process(&process(&["/bin/true"])).await.unwrap();
        c.wait(p.id, LONG).await.unwrap();
    }
    let all = c.list_processes().await.unwrap();
    assert_eq!(all.len(), 7);
    let first = c.list_processes_page(None, 3).await.unwrap();
    assert_eq!(first, all[..3].to_vec());
    let next = c.list_processes_page(Some(first[2].id), 3).await.unwrap();
    assert_eq!(next, all[3..6].to_vec());
    let last = c.list_processes_page(Some(all[5].id), 3).await.unwrap();
    assert_eq!(last, all[6..].to_vec());
}
