//! An OpenRelay template build whose client goes away, or whose server is killed: the
//! build sandbox never outlives its build. A client that disconnects (or a `sandboxd
//! templates build` killed mid-build) leaves the build to finish in the server, which
//! makes the template and destroys the builder; a server killed with -9 mid-build
//! destroys the builder when it starts again (its record marks it as a builder). Either
//! way no quota stays held and nothing of it is left on the host (dirs, mounts, loop
//! devices, cgroups, id slots).

mod common;
mod openrelay;
mod serve_bin;

use openrelay::{Or, MASTER};
use serde_json::json;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// One sandbox per workspace: a builder left running holds the whole quota.
const ONE: [(&str, &str); 1] = [("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", "1")];

/// The sandbox dirs (engine ids) under `data`, warm entries left out.
fn sandbox_dirs(data: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(data.join("sandboxes")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect()
}

/// Loop devices whose backing file lies under `data`.
fn loops_under(data: &Path) -> Vec<String> {
    let out = std::process::Command::new("losetup")
        .arg("-a")
        .output()
        .expect("losetup -a");
    let prefix = data.display().to_string();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&prefix))
        .map(String::from)
        .collect()
}

/// The cgroups named `id` under any controller's `sandboxd` parent.
fn cgroups_of(id: &str) -> Vec<String> {
    let mut left = Vec::new();
    for ctrl in std::fs::read_dir("/sys/fs/cgroup").expect("cgroup root") {
        let dir = ctrl.expect("controller").path().join("sandboxd").join(id);
        if dir.exists() {
            left.push(dir.display().to_string());
        }
    }
    left
}

/// Sends a template build and returns its connection, without reading the answer.
fn start_build(addr: std::net::SocketAddr, body: &serde_json::Value) -> TcpStream {
    let body = body.to_string();
    let mut conn = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST /v1/sandbox-templates HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\
         authorization: Bearer {}\r\n\r\n",
        body.len(),
        MASTER
    );
    conn.write_all(head.as_bytes()).expect("send head");
    conn.write_all(body.as_bytes()).expect("send body");
    conn
}

/// Waits (up to `limit`) until `done`, failing the test with `what` otherwise.
fn wait_long(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn template_ids(or: &Or) -> Vec<String> {
    or.get("/v1/sandbox-templates").json()["templates"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["id"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The server stopped (its warm pool drained): no mount or loop device is left under
/// `data`.
fn assert_host_clean(or: Or, data: &Path) {
    drop(or);
    assert_eq!(
        common::mounts_under(data),
        Vec::<String>::new(),
        "mounts left"
    );
    assert_eq!(loops_under(data), Vec::<String>::new(), "loop devices left");
}

/// The builder is gone with every trace of it, and the one-sandbox quota is free again.
fn assert_nothing_held(or: &Or, data: &Path, builders: &[String]) {
    assert_eq!(
        sandbox_dirs(data),
        Vec::<String>::new(),
        "sandbox dirs left"
    );
    let mounts: Vec<String> = builders
        .iter()
        .flat_map(|b| common::mounts_under(&data.join("sandboxes").join(b)))
        .collect();
    assert_eq!(mounts, Vec::<String>::new(), "the builder's mounts");
    let cgroups: Vec<String> = builders.iter().flat_map(|b| cgroups_of(b)).collect();
    assert_eq!(cgroups, Vec::<String>::new(), "the builder's cgroups");
    let leases = common::slot_leases(data);
    let held: Vec<&String> = leases.iter().filter(|l| builders.contains(l)).collect();
    assert!(held.is_empty(), "the builder's id slot is still claimed");
    let made = or.create(&json!({"template": "default", "run": {"cmd": "echo ok"}}));
    assert_eq!(made["result"]["stdout"], "ok\n", "{made}");
    or.delete(made["id"].as_str().expect("id"));
}

#[test]
fn a_build_whose_client_disconnects_finishes_and_destroys_its_builder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let or = Or::start(&data, &ONE);
    let conn = start_build(
        or.server.addr,
        &json!({"name": "left", "run": ["sleep 3; echo built > /opt/left"]}),
    );
    common::wait_for("the build sandbox", || !sandbox_dirs(&data).is_empty());
    let builders = sandbox_dirs(&data);
    // The client gives up (curl -m, Ctrl-C): the connection closes mid-build.
    drop(conn);
    // Its dir goes before its record ends (the network is detached in between): the
    // one-sandbox quota is free only once both are gone.
    wait_long("the builder gone", Duration::from_secs(120), || {
        sandbox_dirs(&data).is_empty() && or.active().is_empty()
    });
    // The build went on to its end: the template is there and runs.
    assert!(template_ids(&or).contains(&"left".to_owned()));
    let made = or.create(&json!({"template": "left", "run": {"cmd": "cat /opt/left"}}));
    assert_eq!(made["result"]["stdout"], "built\n", "{made}");
    or.delete(made["id"].as_str().expect("id"));
    assert_nothing_held(&or, &data, &builders);
    assert_host_clean(or, &data);
}

#[test]
fn a_cli_build_killed_mid_build_leaves_no_builder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let or = Or::start(&data, &ONE);
    let url = format!("http://{}", or.server.addr);
    let mut cli = std::process::Command::new(serve_bin::BIN)
        .args(["templates", "build", "cli-left", "--run"])
        .arg("sleep 3; echo built > /opt/cli")
        .args(["--url", &url, "--key", MASTER])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("sandboxd templates build");
    common::wait_for("the build sandbox", || !sandbox_dirs(&data).is_empty());
    let builders = sandbox_dirs(&data);
    cli.kill().expect("kill -9 the CLI");
    cli.wait().expect("reap the CLI");
    // Its dir goes before its record ends (the network is detached in between): the
    // one-sandbox quota is free only once both are gone.
    wait_long("the builder gone", Duration::from_secs(120), || {
        sandbox_dirs(&data).is_empty() && or.active().is_empty()
    });
    assert!(template_ids(&or).contains(&"cli-left".to_owned()));
    assert_nothing_held(&or, &data, &builders);
    assert_host_clean(or, &data);
}

#[test]
fn a_server_killed_mid_build_destroys_the_builder_once_restarted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &ONE);
    let conn = start_build(
        server.addr,
        &json!({"name": "killed", "run": ["sleep 600"]}),
    );
    common::wait_for("the build sandbox", || !sandbox_dirs(&data).is_empty());
    let builders = sandbox_dirs(&data);
    // Running its step (not still starting): its mounts and cgroups are all there.
    let builder_dir = data.join("sandboxes").join(&builders[0]);
    common::wait_for("the builder's mounts", || {
        !common::mounts_under(&builder_dir).is_empty()
    });
    server.kill9();
    drop(conn);
    let or = Or::start(&data, &ONE);
    // Re-adoption ran before the server listened.
    assert_eq!(sandbox_dirs(&data), Vec::<String>::new(), "builder kept");
    assert!(!template_ids(&or).contains(&"killed".to_owned()));
    assert_nothing_held(&or, &data, &builders);
    assert_host_clean(or, &data);
}
