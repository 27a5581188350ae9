//! A streamed exec whose start cannot be followed: in a sandbox that cannot answer
//! (frozen here, by hand) the dialect's `unavailable` error comes once the start is
//! given up, without first waiting for the kill the engine then sends (which a frozen
//! sandbox cannot answer either); one the agent refuses (a missing working directory)
//! is the dialect's `invalid_request`, and no kill is sent, since nothing started.

mod freezer;
mod runzivo_api;

use runzivo_api::Server;
use serde_json::json;
use std::time::{Duration, Instant};

/// The server's agent answer bound (`SANDBOXD_AGENT_ANSWER_SECONDS`).
const BOUND: u64 = 3;

/// The engine's debug line for a kill sent after a start that could not be followed.
const KILL_LINE: &str = "killing a start that was not followed";

/// The server's log: the engine's debug lines too.
const LOG: (&str, &str) = ("RUST_LOG", "info,sandboxd_engine=debug");

/// Thaws the sandbox when dropped, before the server deletes it, whatever failed.
struct Thaw(String);

impl Drop for Thaw {
    fn drop(&mut self) {
        freezer::thaw(&self.0);
    }
}

/// The engine's id of the server's only sandbox (its directory in the data dir; the
/// warm pool's are hidden ones).
fn only_sandbox(s: &Server) -> String {
    let dirs: Vec<String> = std::fs::read_dir(s.data_dir().join("sandboxes"))
        .expect("sandboxes dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

/// A server with the short agent bound, and its one sandbox (the dialect's id), frozen
/// until the `Thaw` is dropped.
async fn frozen_sandbox() -> (Server, String, Thaw) {
    let bound = BOUND.to_string();
    let s = Server::start_with_env(30, &[("SANDBOXD_AGENT_ANSWER_SECONDS", &bound), LOG]);
    let id = s.create().await;
    let engine_id = only_sandbox(&s);
    freezer::set_frozen(&engine_id, true);
    (s, id, Thaw(engine_id))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_exec_in_a_frozen_sandbox_fails_without_waiting_for_its_kill() {
    let (s, id, _thaw) = frozen_sandbox().await;
    let (path, body) = (s.path(&format!("/{id}/exec")), json!({"cmd": "true"}));
    let began = Instant::now();
    let exec = s.json("POST", &path, &body);
    let reply = tokio::time::timeout(Duration::from_secs(120), exec)
        .await
        .expect("no answer to a streamed exec of a frozen sandbox");
    let took = began.elapsed();
    reply.expect(503, "sandbox_exec_unavailable");
    // An unanswered call is given up one to two bounds after it began (the bound, then
    // a health check bounded as long); a kill waited for would add as much again. The
    // midpoint, three bounds, leaves a bound of slack either way on a busy machine.
    assert!(
        took < Duration::from_secs(3 * BOUND),
        "the error took {took:?} with a {BOUND} s bound"
    );
    // The kill was still sent (it may have started before the sandbox froze).
    // Logged before the answer, but stored by the test's log reader a moment later.
    s.wait_for_line(|l| l.contains(KILL_LINE));
}

/// The commands a frozen sandbox's agent may yet start count against the session limit
/// until their kills are answered: four streamed execs given up at once leave no
/// session for a fifth right after (it was admitted, and a client retrying at once
/// could have more commands started than the limit, none with a driver).
#[tokio::test(flavor = "multi_thread")]
async fn unfollowed_starts_keep_their_sessions_until_their_kills_are_answered() {
    let (s, id, _thaw) = frozen_sandbox().await;
    let (path, body) = (s.path(&format!("/{id}/exec")), json!({"cmd": "true"}));
    // The Runzivo dialect's session limit (`MAX_SESSIONS`).
    let (a, b, c, d) = tokio::join!(
        s.json("POST", &path, &body),
        s.json("POST", &path, &body),
        s.json("POST", &path, &body),
        s.json("POST", &path, &body),
    );
    for reply in [a, b, c, d] {
        reply.expect(503, "sandbox_exec_unavailable");
    }
    // The kills wait a bound at least (the sandbox is still frozen): their sessions too.
    s.json("POST", &path, &body)
        .await
        .expect(409, "session_limit_reached");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_exec_the_agent_refuses_sends_no_kill() {
    let s = Server::start_with_env(30, &[LOG]);
    let id = s.create().await;
    let path = s.path(&format!("/{id}/exec"));
    let body = json!({"cmd": "pwd", "cwd": "/no/such/dir"});
    s.json("POST", &path, &body)
        .await
        .expect(400, "invalid_request");
    // The request's own line is logged once it is answered, after any kill's.
    s.wait_for_line(|l| l.contains("method=\"POST\"") && l.contains("status=400"));
    let kills: Vec<String> = s
        .log_lines()
        .into_iter()
        .filter(|l| l.contains(KILL_LINE))
        .collect();
    assert!(kills.is_empty(), "{kills:?}");
}
