//! gVisor restores and other sandboxes' mounts: a restore from disk, and a fork given
//! egress (whose `runsc restore` runs in a mount namespace of its own), must not keep a
//! copy of other sandboxes' mounts alive. Sandboxes (gVisor and container, each with a
//! loop-mounted disk) started before the restores are destroyed while the restored ones
//! run: their mounts and loop devices are really gone, on the host and in every mount
//! namespace of the runsc processes. Skipped where runsc is missing.

mod common;
mod gvisor_common;

use gvisor_common::Gvisor;
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use sandboxd_runtime::linux::NetConfig;
use sandboxd_runtime::{Isolation, NetworkSpec, Runtime, SandboxHandle, SandboxSpec};
use std::path::Path;

fn spec(isolation: Isolation, disk_mb: u32) -> SandboxSpec {
    let mut spec = common::spec("default");
    spec.isolation = isolation;
    spec.disk_mb = disk_mb;
    spec
}

/// Lines of `losetup -a` (attached loop devices) that name `state_dir`'s disk image.
fn loops_of(state_dir: &Path) -> Vec<String> {
    let out = std::process::Command::new("losetup")
        .arg("-a")
        .output()
        .expect("losetup");
    let dir = state_dir.display().to_string();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&dir))
        .map(String::from)
        .collect()
}

/// Lines of process `pid`'s mountinfo that name `state_dir` or the loop device `dev`.
fn mounts_seen_by(pid: i32, state_dir: &Path, dev: &str) -> Vec<String> {
    let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")) else {
        return Vec::new(); // gone meanwhile
    };
    let dir = state_dir.display().to_string();
    let dev = format!(" /dev/{dev} ");
    info.lines()
        .filter(|l| l.contains(&dir) || l.contains(&dev))
        .map(String::from)
        .collect()
}

#[test]
fn restores_keep_no_copy_of_other_sandboxes_mounts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().canonicalize().expect("canonical");
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let gv = Gvisor(gvisor_common::raw_gvisor(&data).with_network(NetConfig::from_host()));
    let ct_dir = tempfile::tempdir().expect("tempdir");
    let ct = common::runtime(ct_dir.path());

    // The others exist before the restores copy any mount namespace.
    let others: Vec<(&dyn Runtime, SandboxHandle)> = vec![
        (
            &gv.0,
            gv.start(&spec(Isolation::Gvisor, 64))
                .expect("gVisor start"),
        ),
        (
            &*ct,
            ct.start(&spec(Isolation::Container, 64))
                .expect("container start"),
        ),
    ];
    let devices: Vec<String> = others
        .iter()
        .map(|(_, h)| {
            std::fs::read_to_string(h.state_dir.join("layer.loop"))
                .expect("a loop-mounted disk")
                .trim()
                .to_string()
        })
        .collect();

    // A sandbox restored from disk, and a fork of it given egress.
    let restored = gv.start(&spec(Isolation::Gvisor, 0)).expect("start");
    let on_disk = gv.checkpoint(&restored).expect("pause to disk");
    let restored = gv.restore(&on_disk).expect("restore");
    let (snapshot, restored) = gv.snapshot_memory(&restored, uuid::Uuid::new_v4());
    let snapshot = snapshot.expect("memory snapshot");
    let mut fork_spec = spec(Isolation::Gvisor, 0);
    fork_spec.extra_layers = vec![snapshot.layer.digest.clone()];
    let fork = gv
        .start_from_memory(&fork_spec, &NetworkSpec::egress(vec![]), &snapshot.image)
        .expect("fork with egress");
    // The host processes of the restored sandboxes: sentries, gofers, ptrace stubs.
    let runsc: Vec<i32> = [&restored, &fork]
        .iter()
        .flat_map(|h| gv.cgroups().procs(h.id))
        .collect();
    assert!(runsc.len() >= 4, "runsc processes not found: {runsc:?}");

    for ((rt, handle), dev) in others.iter().zip(&devices) {
        // What is looked for is there before the destroy (in this process's namespace).
        let host = mounts_seen_by(std::process::id() as i32, &handle.state_dir, dev);
        assert!(host.len() >= 2, "disk and root not found: {host:?}");
        assert_eq!(loops_of(&handle.state_dir).len(), 1);
        // No runsc process holds a copy of them (a copy would keep the disk's loop
        // device busy until the state dir's removal detaches it, after destroy has
        // waited for it in vain).
        for &pid in &runsc {
            assert_eq!(
                mounts_seen_by(pid, &handle.state_dir, dev),
                Vec::<String>::new(),
                "runsc process {pid} holds a mount of sandbox {}",
                handle.id
            );
        }
        rt.destroy(handle).expect("destroy");
        assert_eq!(
            common::mounts_under(&handle.state_dir),
            Vec::<String>::new()
        );
        assert_eq!(
            loops_of(&handle.state_dir),
            Vec::<String>::new(),
            "loop device kept"
        );
        for &pid in &runsc {
            assert_eq!(
                mounts_seen_by(pid, &handle.state_dir, dev),
                Vec::<String>::new(),
                "runsc process {pid} keeps a mount of destroyed sandbox {}",
                handle.id
            );
        }
    }
    // The restored ones still run.
    for handle in [&restored, &fork] {
        let (code, out) = common::agent_sh(handle, "echo alive");
        assert_eq!((code, out.trim()), (Some(0), "alive"));
    }
    for handle in [&restored, &fork] {
        gv.destroy(handle).expect("destroy");
    }
    gv.delete_memory_snapshot(&snapshot.image).expect("image");
    gv.delete_layer(&snapshot.layer.digest).expect("layer");
}
