//! Both isolation tiers in one server (real runsc): a server whose default is the
//! container tier starts gVisor sandboxes by each route (workspace default, OpenRelay
//! template, Runzivo field) beside container ones, each answered by the kernel its
//! views report; precedence is request > template > workspace > server; a restart
//! re-adopts both kinds; destroy leaves nothing of either; and without runsc a gVisor
//! request gets a clear refusal in each dialect's shape.

mod serve_bin;

use serde_json::{json, Value};
use serve_bin::{cli, cli_status, Server};
use std::path::Path;

const MASTER: &str = "tiers-test-master-key";
const RUNZIVO: &str = "/v1/customer/tenants/default/sandboxes";
const TEMPLATES: &str = "/v1/sandbox-templates";

/// Whether the server would find runsc (`SANDBOXD_RUNSC`, else `PATH`), as it does.
fn runsc_installed() -> bool {
    sandboxd_runtime::linux::gvisor::GvisorRuntime::available()
}

fn host_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("osrelease")
        .trim()
        .to_owned()
}

/// `sandboxd workspace set-isolation default TIER` on the server's data dir.
fn set_workspace_tier(dir: &Path, tier: &str) {
    let dir = dir.to_str().expect("utf-8 dir");
    let out = cli(
        &[
            "workspace",
            "set-isolation",
            "default",
            tier,
            "--data-dir",
            dir,
        ],
        "",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), tier);
}

/// The uuid of the sandbox a Runzivo id names (from OpenRelay's list, which shows
/// every sandbox of the workspace by its engine id).
fn uuid_of_runzivo(server: &Server, before: &[String]) -> String {
    let list = server.request("GET", "/v1/sandboxes?limit=100", MASTER, None);
    let list = list.json();
    let new: Vec<String> = list["sandboxes"]
        .as_array()
        .expect("sandboxes")
        .iter()
        .filter_map(|s| s["id"].as_str().map(str::to_owned))
        .filter(|id| !before.contains(id))
        .collect();
    assert_eq!(new.len(), 1, "{list}");
    new[0].clone()
}

/// Which kernel answers in sandbox `id`: `gvisor` when gVisor's sentry does (its fake
/// release and boot banner), `container` when the host's does.
fn kernel_of(server: &Server, id: &str) -> &'static str {
    let (code, out) = server.exec(
        MASTER,
        id,
        &["/bin/sh", "-c", "uname -r; dmesg 2>/dev/null | head -3"],
    );
    assert_eq!(code, 0, "{out}");
    let release = out.lines().next().unwrap_or_default();
    match (release == host_release(), out.contains("gVisor")) {
        (true, false) => "container",
        (false, true) => "gvisor",
        other => panic!("neither kernel clearly answers ({other:?}): {out}"),
    }
}

/// The tier OpenRelay's view of `id` reports.
fn reported_tier(server: &Server, id: &str) -> String {
    let got = server.request("GET", &format!("/v1/sandboxes/{id}"), MASTER, None);
    assert_eq!(got.status, 200, "{}", got.text());
    got.json()["isolation"]
        .as_str()
        .unwrap_or("none")
        .to_owned()
}

/// Every trace a sandbox leaves on the host, as found: its state dir, runsc state,
/// mounts and cgroups naming it.
fn traces_of(dir: &Path, id: &str) -> Vec<String> {
    let mut found = Vec::new();
    if dir.join("sandboxes").join(id).exists() {
        found.push("state dir".to_owned());
    }
    if let Ok(entries) = std::fs::read_dir(dir.join("runsc")) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().contains(id) {
                found.push(format!("runsc state {:?}", e.file_name()));
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    found.extend(mounts.lines().filter(|l| l.contains(id)).map(str::to_owned));
    find_named(Path::new("/sys/fs/cgroup"), id, 4, &mut found);
    found
}

/// Paths under `dir` (at most `depth` levels down) whose name contains `id`.
fn find_named(dir: &Path, id: &str, depth: u32, found: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(kind) = e.file_type() else { continue };
        if !kind.is_dir() {
            continue;
        }
        if e.file_name().to_string_lossy().contains(id) {
            found.push(e.path().display().to_string());
        } else if depth > 0 {
            find_named(&e.path(), id, depth - 1, found);
        }
    }
}

#[test]
fn one_container_server_runs_gvisor_sandboxes_by_each_route_and_keeps_them_apart() {
    if !runsc_installed() {
        assert!(
            std::env::var_os("SANDBOXD_CI").is_none(),
            "runsc is missing in CI"
        );
        eprintln!("skipped: runsc is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [
        ("SANDBOXD_NETWORK", "none"),
        ("SANDBOXD_ISOLATION", "container"),
    ];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let mut sandboxes: Vec<(String, &str)> = Vec::new();

    // Workspace default: an Inngest create (which names no tier) runs on gVisor.
    set_workspace_tier(dir.path(), "gvisor");
    let inngest = server.create_sandbox(
        MASTER,
        &json!({"name": "ws-default", "vcpu": 1, "memoryMb": 256}),
    );
    sandboxes.push((inngest, "gvisor"));
    // A request's own choice goes before the workspace's.
    let before: Vec<String> = sandboxes.iter().map(|s| s.0.clone()).collect();
    let r = server.request(
        "POST",
        RUNZIVO,
        MASTER,
        Some(&json!({"isolation": "container"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["isolation"], "container", "{}", r.text());
    sandboxes.push((uuid_of_runzivo(&server, &before), "container"));

    // An OpenRelay template built for gVisor, on a workspace back to the server's tier:
    // its sandboxes run on gVisor, unless the create says otherwise.
    set_workspace_tier(dir.path(), "server");
    let build = json!({"name": "gv", "run": ["echo built > /built"], "isolation": "gvisor"});
    let t = server.request("POST", TEMPLATES, MASTER, Some(&build));
    assert_eq!(t.status, 201, "{}", t.text());
    assert_eq!(t.json()["isolation"], "gvisor", "{}", t.text());
    let listed = server.request("GET", TEMPLATES, MASTER, None).json();
    let gv = listed["templates"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["id"] == "gv"))
        .cloned();
    assert_eq!(
        gv.map(|t| t["isolation"].clone()),
        Some(json!("gvisor")),
        "{listed}"
    );
    for (body, tier) in [
        (json!({"template": "gv"}), "gvisor"),
        (
            json!({"template": "gv", "isolation": "container"}),
            "container",
        ),
    ] {
        let r = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.json()["isolation"], tier, "{}", r.text());
        sandboxes.push((r.json()["id"].as_str().expect("id").to_owned(), tier));
    }

    // Runzivo's field, and its default (the server's container tier).
    for (body, tier) in [
        (json!({"isolation": "gvisor"}), "gvisor"),
        (json!({}), "container"),
    ] {
        let before: Vec<String> = sandboxes.iter().map(|s| s.0.clone()).collect();
        let r = server.request("POST", RUNZIVO, MASTER, Some(&body));
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.json()["isolation"], tier, "{}", r.text());
        sandboxes.push((uuid_of_runzivo(&server, &before), tier));
    }

    // Unknown tiers: a 400 in each dialect's shape, at each place a tier is named.
    let r = server.request("POST", RUNZIVO, MASTER, Some(&json!({"isolation": "vm"})));
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, json!("invalid_request")),
        "{}",
        r.text()
    );
    let r = server.request(
        "POST",
        "/v1/sandboxes",
        MASTER,
        Some(&json!({"template": "default", "isolation": "vm"})),
    );
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (400, json!("INVALID_REQUEST")),
        "{}",
        r.text()
    );
    let r = server.request(
        "POST",
        TEMPLATES,
        MASTER,
        Some(&json!({"name": "x", "run": [], "isolation": "VM"})),
    );
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (400, json!("INVALID_REQUEST")),
        "{}",
        r.text()
    );
    let d = dir.path().to_str().expect("utf-8");
    let bad = cli_status(
        &[
            "workspace",
            "set-isolation",
            "default",
            "vm",
            "--data-dir",
            d,
        ],
        "",
    );
    assert!(!bad.status.success(), "an unknown tier was stored");

    // Each sandbox is answered by the kernel of the tier it reports, in every view.
    let check = |server: &Server| {
        for (id, tier) in &sandboxes {
            assert_eq!(reported_tier(server, id), *tier, "sandbox {id}");
            assert_eq!(kernel_of(server, id), *tier, "sandbox {id}");
        }
        let cli_list = cli(
            &[
                "sandbox",
                "list",
                "--url",
                &format!("http://{}", server.addr),
                "--key",
                MASTER,
            ],
            "",
        );
        let cli_list = String::from_utf8_lossy(&cli_list.stdout).into_owned();
        for (id, tier) in &sandboxes {
            let line = cli_list.lines().find(|l| l.starts_with(id.as_str()));
            assert!(
                line.is_some_and(|l| l.contains(&format!("isolation={tier}"))),
                "{cli_list}"
            );
        }
    };
    check(&server);
    let (_, built) = server.exec(MASTER, &sandboxes[2].0, &["/bin/cat", "/built"]);
    assert_eq!(built, "built\n", "the template's filesystem");

    // A restart re-adopts both kinds, each on its own backend.
    drop(server);
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    check(&server);

    for (id, _) in &sandboxes {
        server.destroy(MASTER, id);
    }
    for (id, tier) in &sandboxes {
        assert_eq!(
            traces_of(dir.path(), id),
            Vec::<String>::new(),
            "{tier} sandbox {id}"
        );
    }
    drop(server);
}

#[test]
fn without_runsc_a_gvisor_request_is_refused_clearly_in_each_dialect() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("no-runsc-here");
    let missing = missing.to_str().expect("utf-8");
    let env = [
        ("SANDBOXD_NETWORK", "none"),
        ("SANDBOXD_ISOLATION", "container"),
        ("SANDBOXD_RUNSC", missing),
    ];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let says_why = |r: &serve_bin::Reply| {
        let text = r.text();
        assert!(text.contains("runsc") && text.contains(missing), "{text}");
    };

    let r = server.request(
        "POST",
        RUNZIVO,
        MASTER,
        Some(&json!({"isolation": "gvisor"})),
    );
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (503, json!("sandboxes_unavailable")),
        "{}",
        r.text()
    );
    says_why(&r);
    let r = server.request(
        "POST",
        "/v1/sandboxes",
        MASTER,
        Some(&json!({"template": "default", "isolation": "gvisor"})),
    );
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (503, json!("UNAVAILABLE")),
        "{}",
        r.text()
    );
    says_why(&r);
    let build = json!({"name": "gv", "run": [], "isolation": "gvisor"});
    let r = server.request("POST", TEMPLATES, MASTER, Some(&build));
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (503, json!("UNAVAILABLE")),
        "{}",
        r.text()
    );
    says_why(&r);
    set_workspace_tier(dir.path(), "gvisor");
    let r = server.request(
        "POST",
        "/v2/sandboxes",
        MASTER,
        Some(&json!({"name": "n", "vcpu": 1, "memoryMb": 256})),
    );
    assert_eq!(
        (r.status, r.json()["errors"][0]["code"].clone()),
        (503, json!("compute_unavailable")),
        "{}",
        r.text()
    );
    says_why(&r);

    // Nothing was recorded or started, and nothing ran as a container instead.
    let list: Value = server
        .request("GET", "/v1/sandboxes?state=exited&limit=100", MASTER, None)
        .json();
    assert_eq!(list["sandboxes"], json!([]), "{list}");
    let list: Value = server
        .request("GET", "/v1/sandboxes?limit=100", MASTER, None)
        .json();
    assert_eq!(list["sandboxes"], json!([]), "{list}");
    // The container tier works on.
    set_workspace_tier(dir.path(), "server");
    let id = server.create_sandbox(MASTER, &json!({"name": "c", "vcpu": 1, "memoryMb": 256}));
    assert_eq!(reported_tier(&server, &id), "container");
    server.destroy(MASTER, &id);
    drop(server);

    // A server whose default tier is gVisor does not start without runsc.
    let out = std::process::Command::new(serve_bin::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("SANDBOXD_ISOLATION", "gvisor")
        .env("SANDBOXD_RUNSC", missing)
        .env("SANDBOXD_METRICS_LISTEN", "none")
        .output()
        .expect("run serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("gvisor") && stderr.contains(missing),
        "{stderr}"
    );
}

/// A gVisor sandbox paused to disk on a container-default server outlives a restart
/// without runsc: it is kept PAUSED (its memory image untouched), not ended as crashed
/// and removed, and once runsc is back it resumes with its files (found by an outside
/// review: the router asked the container backend, which saw no agent and ended it).
#[test]
fn a_gvisor_sandbox_on_disk_survives_a_restart_without_runsc() {
    if !runsc_installed() {
        eprintln!("skipped: runsc is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [("SANDBOXD_NETWORK", "none")];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    set_workspace_tier(dir.path(), "gvisor");
    let id = server.create_sandbox(MASTER, &json!({"name": "kept", "vcpu": 1, "memoryMb": 256}));
    let (code, out) = server.exec(MASTER, &id, &["/bin/sh", "-c", "echo kept > /tmp/mark"]);
    assert_eq!(code, 0, "{out}");
    let r = server.request("POST", &format!("/v2/sandboxes/{id}/pause"), MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["status"], "PAUSED", "{}", r.text());
    drop(server);

    let missing = dir.path().join("no-runsc-here");
    let missing = missing.to_str().expect("utf-8");
    let without = [("SANDBOXD_NETWORK", "none"), ("SANDBOXD_RUNSC", missing)];
    let server = Server::start_with_env(dir.path(), Some(MASTER), &without);
    let r = server.request("GET", &format!("/v2/sandboxes/{id}"), MASTER, None);
    assert_eq!(r.json()["data"]["status"], "PAUSED", "{}", r.text());
    drop(server);

    let server = Server::start_with_env(dir.path(), Some(MASTER), &env);
    let r = server.request("POST", &format!("/v2/sandboxes/{id}/resume"), MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());
    let (code, out) = server.exec(MASTER, &id, &["/bin/cat", "/tmp/mark"]);
    assert_eq!((code, out.trim()), (0, "kept"));
    server.destroy(MASTER, &id);
}

/// Pinning (OpenRelay `placement: pinned`, the only dialect with it) on the gVisor tier
/// is refused up front with a 400, nothing recorded or started: gVisor's sentry keeps
/// its own vCPUs, so a host cpuset would not be the dedicated CPUs the sandbox sees.
/// Also on a server full (and a workspace at its quota): the 400, not a 503 or 429.
#[test]
fn pinning_a_gvisor_sandbox_is_refused_before_anything_starts() {
    if !runsc_installed() {
        eprintln!("skipped: runsc is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let env = [
        ("SANDBOXD_NETWORK", "none"),
        ("SANDBOXD_ISOLATION", "container"),
        ("SANDBOXD_MAX_SANDBOXES", "1"),
        ("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", "1"),
    ];
    let server = Server::start_with_env(&data, Some(MASTER), &env);
    let body = json!({"template": "default", "cpu": 1, "waitSeconds": 0});
    let r = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
    assert_eq!(r.status / 100, 2, "{}", r.text());
    let filler = r.json()["id"].as_str().expect("id").to_owned();
    let body = json!({"template": "default", "cpu": 1, "placement": "pinned",
        "isolation": "gvisor", "waitSeconds": 0});
    let r = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (400, json!("INVALID_REQUEST")),
        "{}",
        r.text()
    );
    assert!(r.text().contains("pinning"), "{}", r.text());
    let listed = server.request("GET", "/v1/sandboxes", MASTER, None);
    assert_eq!(listed.status, 200, "{}", listed.text());
    let ids: Vec<_> = listed.json()["sandboxes"]
        .as_array()
        .expect("sandboxes")
        .iter()
        .map(|s| s["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!(filler)], "{}", listed.text());
    let r = server.request("DELETE", &format!("/v1/sandboxes/{filler}"), MASTER, None);
    assert_eq!(r.status / 100, 2, "{}", r.text());
    let state_dirs: Vec<_> = std::fs::read_dir(data.join("sandboxes"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|name| !name.starts_with('.')) // the warm pool's entries
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(state_dirs, Vec::<String>::new());
    drop(server);
}
