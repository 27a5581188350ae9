//! Disk limits on real sandboxes: filling the writable layer is ENOSPC inside, other
//! sandboxes still write, snapshots still capture, and destroy leaves no loop device.

mod common;

use common::{agent_sh, assert_gone, runtime, spec};
use sandboxd_runtime::Runtime;
use std::path::Path;

/// Loop devices (`/sys/block/loopN`) whose backing file lies under `dir`.
fn loops_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    std::fs::read_dir("/sys/block")
        .expect("/sys/block")
        .filter_map(|e| e.ok())
        .filter(|e| {
            let file =
                std::fs::read_to_string(e.path().join("loop/backing_file")).unwrap_or_default();
            file.starts_with(&prefix)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn filling_the_layer_is_enospc_inside_and_contained() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let mut small = spec("default");
    small.disk_mb = 64;
    let mut other = spec("default");
    other.disk_mb = 64;
    let a = rt.start(&small).expect("start a");
    let b = rt.start(&other).expect("start b");
    assert_eq!(
        loops_under(data.path()).len(),
        2,
        "one loop device per limited sandbox"
    );

    let (code, out) = agent_sh(
        &a,
        "dd if=/dev/zero of=/big bs=1M count=128 2>&1; echo exit=$?",
    );
    assert!(
        out.contains("No space left on device"),
        "dd did not hit ENOSPC: {out}"
    );
    assert!(out.contains("exit=1"), "dd did not fail: {out} ({code:?})");
    let (_, size) = agent_sh(&a, "stat -c %s /big");
    let size: u64 = size.trim().parse().expect("size");
    assert!(
        size <= 64 << 20 && size > 32 << 20,
        "file size {size} not bounded by the 64 MiB disk"
    );

    // The full sandbox can still free space; the other one writes as usual.
    let (_, out) = agent_sh(&b, "dd if=/dev/zero of=/f bs=1M count=8 2>&1 && echo ok");
    assert!(
        out.trim_end().ends_with("ok"),
        "second sandbox could not write: {out}"
    );
    let (_, out) = agent_sh(
        &a,
        "rm /big && echo small > /etc/written && cat /etc/written",
    );
    assert_eq!(out.trim(), "small");

    // Snapshots capture the limited layer.
    let layer = rt.capture_layer(&a).expect("capture");
    let mut child = spec("default");
    child.extra_layers = vec![layer.digest.clone()];
    child.disk_mb = 64;
    let c = rt.start(&child).expect("start from snapshot");
    assert_eq!(agent_sh(&c, "cat /etc/written").1.trim(), "small");

    // Oldest first: a later sandbox must not keep an earlier one's disk alive (its
    // mount namespace began as a copy of the host's, disks included).
    for (h, left) in [(&a, 2), (&b, 1), (&c, 0)] {
        rt.destroy(h).expect("destroy");
        assert_gone(&rt, data.path(), h);
        assert_eq!(
            loops_under(data.path()).len(),
            left,
            "a destroyed sandbox's disk stays attached"
        );
    }
    assert_eq!(
        loops_under(data.path()),
        Vec::<String>::new(),
        "loop devices left attached"
    );
    rt.delete_layer(&layer.digest).expect("delete layer");
}

#[test]
fn an_unlimited_sandbox_uses_no_loop_device() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let h = rt.start(&spec("default")).expect("start");
    assert_eq!(loops_under(data.path()), Vec::<String>::new());
    assert_eq!(agent_sh(&h, "echo x > /etc/x && cat /etc/x").1.trim(), "x");
    rt.destroy(&h).expect("destroy");
    assert_gone(&rt, data.path(), &h);
}

#[test]
fn a_burst_of_concurrent_starts_with_disks_all_get_a_loop_device() {
    // Enough to lose GET_FREE races often: before attaches took turns, 6-18 of 120
    // failed with "no free loop device after 16 attempts".
    const BURST: usize = 120;
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let results: Vec<_> = std::thread::scope(|s| {
        let rt = &rt;
        let threads: Vec<_> = (0..BURST)
            .map(|_| {
                s.spawn(move || {
                    let mut sp = spec("default");
                    sp.disk_mb = 32;
                    rt.start(&sp)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .collect()
    });
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    let started: Vec<_> = results.into_iter().filter_map(|r| r.ok()).collect();
    assert_eq!(loops_under(data.path()).len(), started.len());
    for h in &started {
        rt.destroy(h).expect("destroy");
    }
    assert_eq!(failed, Vec::<String>::new(), "starts failed in a burst");
    assert_eq!(loops_under(data.path()), Vec::<String>::new());
}

#[test]
fn a_destroyed_sandboxs_disk_is_in_no_other_sandboxs_mount_namespace() {
    let data = tempfile::tempdir().expect("tempdir");
    disk_stays_private(&runtime(data.path()), data.path());
}

#[test]
fn a_destroyed_warm_sandboxs_disk_is_in_no_other_sandboxs_mount_namespace() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = common::warm_runtime(data.path(), 2);
    rt.fill_warm_inits(32, false);
    common::wait_for("two warm inits", || rt.warm_inits_ready() == 2);
    disk_stays_private(&rt, data.path());
}

/// Starts a and b with disks, destroys a: b's mount namespace never holds a's mounts or
/// loop device, and a's device is released at once.
fn disk_stays_private(rt: &common::TestRuntime, data: &Path) {
    let rt = &**rt;
    let with_disk = || {
        let mut sp = spec("default");
        sp.disk_mb = 32;
        sp
    };
    let a = rt.start(&with_disk()).expect("start a");
    let b = rt.start(&with_disk()).expect("start b");
    let a_loops = loops_under(&a.state_dir);
    assert_eq!(a_loops.len(), 1, "a has its disk");
    let b_mounts = || {
        std::fs::read_to_string(format!("/proc/{}/mountinfo", b.agent_pid)).expect("mountinfo of b")
    };
    let a_id = a.id.to_string();
    let seen = |info: &str| -> Vec<String> {
        info.lines()
            .filter(|l| {
                l.contains(&a_id) || a_loops.iter().any(|d| l.contains(&format!("/dev/{d} ")))
            })
            .map(String::from)
            .collect()
    };
    assert_eq!(
        seen(&b_mounts()),
        Vec::<String>::new(),
        "b sees a's mounts while a runs"
    );
    rt.destroy(&a).expect("destroy a");
    assert_gone(rt, data, &a);
    assert_eq!(seen(&b_mounts()), Vec::<String>::new(), "b sees a's mounts");
    // The device is released at once, not when b ends.
    let still: Vec<String> = a_loops
        .iter()
        .filter(|d| {
            std::fs::read_to_string(format!("/sys/block/{d}/loop/backing_file"))
                .is_ok_and(|f| f.contains(&a_id))
        })
        .cloned()
        .collect();
    assert_eq!(
        still,
        Vec::<String>::new(),
        "a's loop device is still attached"
    );
    rt.destroy(&b).expect("destroy b");
    assert_eq!(loops_under(&b.state_dir), Vec::<String>::new());
}

/// Bytes the host has allocated for a sandbox's disk image.
fn image_bytes(h: &sandboxd_runtime::SandboxHandle) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(h.state_dir.join("layer.img"))
        .expect("layer.img")
        .blocks()
        * 512
}

#[test]
fn space_freed_inside_a_sandbox_returns_to_the_host() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let mut sp = spec("default");
    sp.disk_mb = 64;
    let h = rt.start(&sp).expect("start");
    let empty = image_bytes(&h);
    let (_, out) = agent_sh(
        &h,
        "head -c 41943040 /dev/urandom > /big && sync && echo ok",
    );
    assert_eq!(out.trim(), "ok");
    let full = image_bytes(&h);
    assert!(
        full >= empty + (32 << 20),
        "40 MiB written, image grew {empty} -> {full}"
    );
    let (_, out) = agent_sh(&h, "rm /big && sync && echo ok");
    assert_eq!(out.trim(), "ok");
    common::wait_for("the freed space to return to the host", || {
        image_bytes(&h) < empty + (8 << 20)
    });
    rt.destroy(&h).expect("destroy");
}
