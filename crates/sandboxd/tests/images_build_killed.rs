//! A Dockerfile build (`sandboxd templates build NAME --file`) killed outright (SIGKILL)
//! while a RUN step runs, beside a server: its step sandbox does not outlive it. The
//! sandbox is tied to the build's process (its PID 1 exits with it), and the server's
//! sweep of dead owners' sandboxes ends its record and removes the rest, so no quota
//! stays held and nothing is left (dirs, mounts, loop devices).

mod common;
mod openrelay;
mod serve_bin;

use openrelay::Or;
use serde_json::json;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};

/// The sandbox dirs (engine ids) under `data`, warm entries and owner marks left out.
fn sandbox_dirs(data: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(data.join("sandboxes")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect()
}

#[test]
fn a_build_killed_mid_step_leaves_no_step_sandbox() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let ctx = tempfile::tempdir().expect("context dir");
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM default\nRUN echo step-is-running && sleep 600\n",
    )
    .expect("Dockerfile");
    // One sandbox per workspace: a step sandbox left running holds the whole quota.
    let or = Or::start(&data, &[("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", "1")]);
    let mut child = Command::new(serve_bin::BIN)
        .args(["templates", "build", "killed", "--file"])
        .arg(ctx.path().join("Dockerfile"))
        .env("SANDBOXD_DATA_DIR", &data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sandboxd templates build");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    loop {
        let line = lines.next().expect("output ended early").expect("a line");
        if line == "step-is-running" {
            break;
        }
    }
    let steps = sandbox_dirs(&data);
    assert_eq!(steps.len(), 1, "one step sandbox: {steps:?}");
    child.kill().expect("kill -9 the build");
    child.wait().expect("reap the build");
    common::wait_for("the step sandbox gone", || sandbox_dirs(&data).is_empty());
    let mounts = common::mounts_under(&data.join("sandboxes").join(&steps[0]));
    assert_eq!(mounts, Vec::<String>::new(), "the step sandbox's mounts");
    // Its record ends once the sweep's teardown is done (a TERMINATING sandbox still
    // holds its quota): then the workspace's one slot is free again.
    common::wait_for("the step sandbox's quota slot freed", || {
        or.active().is_empty()
    });
    let made = or.create(&json!({"template": "default", "run": {"cmd": "echo ok"}}));
    assert_eq!(made["result"]["stdout"], "ok\n", "{made}");
    or.delete(made["id"].as_str().expect("id"));
    drop(or);
    assert_eq!(
        common::mounts_under(&data),
        Vec::<String>::new(),
        "mounts left"
    );
    let loops = Command::new("losetup").arg("-a").output().expect("losetup");
    let loops = String::from_utf8_lossy(&loops.stdout).into_owned();
    let prefix = data.display().to_string();
    assert!(!loops.contains(&prefix), "loop devices left: {loops}");
}
