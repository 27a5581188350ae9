//! Every process of a sandbox is in the sandbox's own cgroup in every hierarchy (each
//! v1 controller: cpu, cpuacct, memory, pids, freezer; or the v2 one), whether it
//! started cold or from a warm init: the init moves itself into them before its exec,
//! and what it forks later (the agent, commands, their children) is born inside.

mod common;

use common::*;
use sandboxd_agent_protocol::{AgentClient, SignalRequest, StartProcess};
use sandboxd_runtime::{Runtime, SandboxHandle};
use std::collections::BTreeSet;
use uuid::Uuid;

/// The v1 controllers a sandbox's limits, usage and pause use.
const CONTROLLERS: [&str; 5] = ["cpu", "cpuacct", "memory", "pids", "freezer"];

/// Parent PID of `pid` (from `/proc/<pid>/stat`), if it still exists.
fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `root` and all its descendants, as the host sees them.
fn tree(root: i32) -> BTreeSet<i32> {
    let all: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .expect("proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, ppid(pid)?)))
        .collect();
    let mut found = BTreeSet::from([root]);
    loop {
        let more: Vec<i32> = all
            .iter()
            .filter(|(pid, parent)| found.contains(parent) && !found.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        if more.is_empty() {
            return found;
        }
        found.extend(more);
    }
}

/// The hierarchies of `pid` (from the host's `/proc/<pid>/cgroup`) that are not in the
/// cgroup `id`, and how many of the wanted ones were seen.
fn outside(pid: i32, id: Uuid) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let want = format!("/{id}");
    let v2 = !text.lines().any(|l| !l.starts_with("0::"));
    let mut wrong = Vec::new();
    let mut seen = 0;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let ours = if v2 {
            true
        } else {
            ctrls.split(',').any(|c| CONTROLLERS.contains(&c))
        };
        if ours {
            seen += ctrls
                .split(',')
                .filter(|c| CONTROLLERS.contains(c))
                .count()
                .max(1);
            if !path.ends_with(&want) {
                wrong.push(line.to_string());
            }
        }
    }
    (wrong, seen)
}

/// Starts a tree inside (a shell, a subshell, sleeps), then checks the agent and every
/// process below it from the host, in every hierarchy.
fn assert_every_process_inside(handle: &SandboxHandle) {
    let client = AgentClient::new(handle.agent_socket.clone());
    let id = Uuid::new_v4();
    let script = "sleep 60 & (sleep 60 & wait) & wait";
    block(client.start_process(&StartProcess {
        id,
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: None,
        cwd: None,
        hold_output: false,
        user: None,
    }))
    .expect("start a process tree");
    // The agent, the shell, the subshell and two sleeps.
    wait_for("the process tree", || tree(handle.agent_pid).len() >= 5);
    let pids = tree(handle.agent_pid);
    let mut wrong = Vec::new();
    for pid in &pids {
        let (out, seen) = outside(*pid, handle.id);
        let v1 = seen >= CONTROLLERS.len();
        let v2 = seen == 1;
        assert!(v1 || v2, "pid {pid}: only {seen} of the controllers seen");
        wrong.extend(out.into_iter().map(|l| format!("pid {pid}: {l}")));
    }
    block(client.signal(
        id,
        &SignalRequest {
            signal: 9,
            group: true,
        },
    ))
    .expect("kill the tree");
    assert_eq!(
        wrong,
        Vec::<String>::new(),
        "processes outside the sandbox's cgroup ({} checked)",
        pids.len()
    );
}

#[test]
fn a_cold_sandboxs_processes_are_all_in_its_cgroups() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let handle = rt.start(&spec("default")).expect("start");
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_every_process_inside(&handle)
    }));
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, data.path(), &handle);
    if let Err(panic) = checked {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn a_warm_sandboxs_processes_are_all_in_its_cgroups() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = warm_runtime(data.path(), 1);
    rt.fill_warm_inits(64, false);
    wait_for("a warm init", || rt.warm_inits_ready() >= 1);
    let mut want = spec("default");
    want.disk_mb = 64;
    let handle = rt.start(&want).expect("start from a warm init");
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(
            handle.state_dir.join("owner").exists(),
            "the start did not take the warm init"
        );
        assert_every_process_inside(&handle);
    }));
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, data.path(), &handle);
    if let Err(panic) = checked {
        std::panic::resume_unwind(panic);
    }
}
