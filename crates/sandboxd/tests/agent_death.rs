//! Agent death: `kill -9` of a sandbox's agent (PID 1 of its PID namespace, found from
//! the host) is noticed within seconds, by a server that started the agent and by one
//! that re-adopted it after a restart: every dialect shows the sandbox ended with a
//! reason, pause is refused with the dialect's conflict, and nothing of it is left (no
//! zombie, cgroup, mount or directory).

mod host;
mod openrelay;
mod serve_bin;

use openrelay::{Or, MASTER};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// How long the server may take to notice (it should take well under a second).
const NOTICE: Duration = Duration::from_secs(15);

#[test]
fn a_killed_agent_ends_its_sandbox_in_every_dialect() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical data dir");
    let or = Or::start(&data, &[]);
    let (inngest, openrelay) = create_both(&or);
    kill_and_check(&or, &data, &inngest, &openrelay);
}

#[test]
fn a_killed_agent_is_noticed_after_a_restart_too() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical data dir");
    let first = Or::start(&data, &[]);
    let (inngest, openrelay) = create_both(&first);
    // Not a child of the next server: only re-adoption can watch it.
    host::kill9(first.server.pid());
    drop(first);
    let second = Or::start(&data, &[]);
    kill_and_check(&second, &data, &inngest, &openrelay);
}

/// One sandbox made through Inngest and one through OpenRelay; their ids.
fn create_both(or: &Or) -> (String, String) {
    let inngest = or.server.create_sandbox(
        MASTER,
        &json!({"name": "doomed", "vcpu": 1, "memoryMb": 256}),
    );
    let openrelay = or.create(&json!({"template": "default"}))["id"]
        .as_str()
        .expect("OpenRelay id")
        .to_owned();
    (inngest, openrelay)
}

fn kill_and_check(or: &Or, data: &Path, inngest: &str, openrelay: &str) {
    let agents: Vec<(i32, u64)> = [inngest, openrelay]
        .iter()
        .map(|id| host::agent_of(id).unwrap_or_else(|| panic!("no agent found for {id}")))
        .collect();
    for (pid, _) in &agents {
        host::kill9(*pid);
    }

    let sandbox = host::poll("Inngest shows the sandbox ended", NOTICE, || {
        let got = inngest_get(or, inngest);
        (got["status"] != "RUNNING" && got["status"] != "TERMINATING").then_some(got)
    });
    assert_eq!(sandbox["status"], "TERMINATED", "{sandbox}");
    let error = sandbox["error"].as_str().unwrap_or_default();
    assert!(error.contains("agent"), "no reason given: {sandbox}");
    let view = host::poll("OpenRelay shows the sandbox ended", NOTICE, || {
        let got = or.get(&format!("/v1/sandboxes/{openrelay}")).json();
        (got["state"] != "running").then_some(got)
    });
    assert_eq!(view["state"], "exited", "{view}");
    assert_eq!(view["exitReason"], "guest_exit", "{view}");
    let listed = or
        .server
        .request("GET", "/v2/sandboxes?limit=100", MASTER, None)
        .json();
    let running: Vec<&Value> = listed["data"]
        .as_array()
        .expect("Inngest list")
        .iter()
        .filter(|s| s["id"] == inngest && s["status"] == "RUNNING")
        .collect();
    assert!(
        running.is_empty(),
        "the list still shows it running: {listed}"
    );

    let paused = or.server.request(
        "POST",
        &format!("/v2/sandboxes/{inngest}/pause"),
        MASTER,
        None,
    );
    assert_eq!(paused.status, 409, "{}", paused.text());
    assert_eq!(paused.json()["errors"][0]["code"], "sandbox_not_running");
    let paused = or.post(&format!("/v1/sandboxes/{openrelay}/pause"), &json!({}));
    assert_eq!(paused.status, 409, "{}", paused.text());
    assert_eq!(openrelay::code(&paused, 409), "INVALID_STATE");

    // The server reaps the agents it started; re-adopted ones are the host init's
    // children by then, which reaps them on its own schedule.
    for (pid, ticks) in agents {
        host::poll("the dead agent is reaped", NOTICE, || {
            (!host::exists(pid, ticks)).then_some(())
        });
    }
    host::assert_gone(data, inngest);
    host::assert_gone(data, openrelay);
}

fn inngest_get(or: &Or, id: &str) -> Value {
    let reply = or
        .server
        .request("GET", &format!("/v2/sandboxes/{id}"), MASTER, None);
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["data"].clone()
}
