//! gVisor sandboxes on disk across a host restart, played by the test: with the server
//! stopped, what a reboot loses goes (each sandbox's root overlay mount, its disk's
//! mount and so its loop device, its cgroups; nothing of a sandbox without egress lives
//! in `/run`), then the server starts again. A sandbox whose root can be mounted again
//! resumes with its processes; one that cannot (its disk image gone) is
//! ended at start-up, not left failing every wake. Skipped where runsc is missing.

mod common;
mod gvisor_common;
#[path = "gvisor_common/server.rs"]
mod gvisor_server;
mod serve_bin;

use gvisor_common::MASTER;
use gvisor_server::gvisor_data;
use std::path::{Path, PathBuf};

/// Every cgroup dir of sandbox `id` (any hierarchy, any parent).
fn cgroup_dirs(id: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten() {
        let Ok(hierarchy) = hierarchy else { continue };
        for parent in std::fs::read_dir(hierarchy.path()).into_iter().flatten() {
            let Ok(parent) = parent else { continue };
            let dir = parent.path().join(id);
            if dir.is_dir() {
                found.push(dir);
            }
        }
    }
    found
}

fn umount(path: &Path) {
    let out = std::process::Command::new("umount")
        .arg(path)
        .output()
        .expect("umount");
    assert!(out.status.success(), "umount {}: {out:?}", path.display());
}

/// What a reboot takes from a sandbox on disk (the server being stopped).
fn reboot(data: &Path, id: &str) {
    let state = data.join("sandboxes").join(id);
    umount(&state.join("rootfs"));
    umount(&state.join("layer"));
    let dirs = cgroup_dirs(id);
    assert!(!dirs.is_empty(), "no cgroup found for {id}");
    for dir in dirs {
        std::fs::remove_dir(&dir).expect("removing an (empty) cgroup");
    }
    assert_eq!(common::mounts_under(&state), Vec::<String>::new());
    let loops = std::process::Command::new("losetup")
        .arg("-a")
        .output()
        .expect("losetup");
    let loops = String::from_utf8_lossy(&loops.stdout);
    assert!(!loops.contains(&state.display().to_string()), "{loops}");
    // Nothing of it in /run, where a reboot's tmpfs would lose it.
    let named = std::process::Command::new("grep")
        .args(["-rl", id, "/run/sandboxd"])
        .output()
        .expect("grep");
    assert!(named.stdout.is_empty(), "{named:?}");
}

#[test]
fn gvisor_sandboxes_on_disk_survive_a_host_restart_or_end_at_start_up() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let data = fixture.path.clone();
    let server = fixture.serve(MASTER, &[]);
    let mut ids = Vec::new();
    for name in ["kept", "broken"] {
        let body = serde_json::json!({"name": name, "vcpu": 1, "memoryMb": 256});
        let id = server.create_sandbox(MASTER, &body);
        let script = format!(
            "echo {name} > /root/marker && (setsid sleep 3601 </dev/null >/dev/null 2>&1 &)"
        );
        let (code, out) = server.exec(MASTER, &id, &["/bin/sh", "-c", &script]);
        assert_eq!(code, 0, "{out}");
        let r = server.request("POST", &format!("/v2/sandboxes/{id}/pause"), MASTER, None);
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            data.join(format!("sandboxes/{id}/memory/checkpoint.img"))
                .is_file(),
            "not on disk"
        );
        ids.push(id);
    }
    drop(server);
    let (kept, broken) = (&ids[0], &ids[1]);
    reboot(&data, kept);
    reboot(&data, broken);
    std::fs::remove_file(data.join(format!("sandboxes/{broken}/layer.img"))).expect("image");

    let server = fixture.serve(MASTER, &[]);
    let r = server.request("GET", &format!("/v2/sandboxes/{kept}"), MASTER, None);
    assert_eq!(r.json()["data"]["status"], "PAUSED", "{}", r.text());
    // Its root and disk are back before any operation (a snapshot reads them).
    let state = data.join("sandboxes").join(kept);
    assert_eq!(
        std::fs::read_to_string(state.join("layer/upper/root/marker")).expect("marker"),
        "kept\n"
    );
    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{kept}/resume"),
        MASTER,
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["status"], "RUNNING", "{}", r.text());
    let (code, out) = server.exec(
        MASTER,
        kept,
        &[
            "/bin/sh",
            "-c",
            "cat /root/marker; cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("kept\n"), "{out}");
    assert!(out.contains("sleep 3601"), "its processes were lost: {out}");

    // The other one is ended, with why in the log; an exec on it says it has ended.
    let r = server.request("GET", &format!("/v2/sandboxes/{broken}"), MASTER, None);
    let status = r.json()["data"]["status"].clone();
    assert!(status == "TERMINATED" || status == "FAILED", "{}", r.text());
    server.wait_for_line(|l| l.contains(broken.as_str()) && l.contains("disk image is gone"));
    let body = serde_json::json!({ "command": ["true"] });
    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{broken}/exec"),
        MASTER,
        Some(&body),
    );
    assert!((400..500).contains(&r.status), "{} {}", r.status, r.text());
    server.destroy(MASTER, kept);
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}
