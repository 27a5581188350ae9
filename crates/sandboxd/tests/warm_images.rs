//! Warm inits parked in images other than `default`: once an image was started, its
//! next start takes an init parked in that image's root (and sees that image, never
//! another's); `images rm` drops the entry and lets the layers go, and a drain (the
//! server's shutdown) leaves no mount, dir or cgroup. Through a real server, the warm
//! start of an image gets the image's `User`, `Env` and `WorkingDir`.

mod common;
mod openrelay;
mod registry;
mod serve_bin;

use common::*;
use registry::sandboxd;
use sandboxd_runtime::Runtime;
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const USER: &str = "test/user:v1";
const GOOD: &str = "test/good:v1";

/// Imports the test layouts `user` and `good` into `data` as [`USER`] and [`GOOD`]
/// (both hold the same two lower layers; `user` has a third with /probe and accounts).
fn import_images(data: &Path) -> tempfile::TempDir {
    let (work, _outside, layouts) = registry::test_layouts();
    for (layout, name) in [("user", USER), ("good", GOOD)] {
        let dir = layouts.join(layout);
        let out = sandboxd(
            data,
            &[
                "images",
                "import",
                dir.to_str().expect("utf-8"),
                "--name",
                name,
            ],
        );
        assert!(out.status.success(), "{}", registry::text(&out));
    }
    work
}

/// The stored layer digests of image `name` (bottom first).
fn image_layers(rt: &TestRuntime, name: &str) -> Vec<String> {
    rt.resolve_image(name).expect("image").layers
}

/// Mounts (anywhere) whose source is one of the layer dirs `digests` of `data`.
fn mounts_of_layers(data: &Path, digests: &[String]) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let sources: Vec<String> = digests
        .iter()
        .map(|d| data.join("layers").join(d).display().to_string())
        .collect();
    info.lines()
        .filter(|l| {
            sources
                .iter()
                .any(|s| l.split(' ').nth(3) == Some(s.as_str()))
        })
        .map(String::from)
        .collect()
}

fn warm_dirs(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("sandboxes"))
        .expect("sandboxes dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".warm-"))
        .collect()
}

fn start(rt: &TestRuntime, image: &str) -> sandboxd_runtime::SandboxHandle {
    rt.start(&spec(image)).expect("start")
}

#[test]
fn an_image_start_takes_the_init_parked_in_that_image_and_no_other() {
    let data = tempfile::tempdir().expect("tempdir");
    let _layouts = import_images(data.path());
    let rt = warm_runtime(data.path(), 1);
    rt.fill_warm_inits(0, false);
    assert!(rt.warm_inits_parked_in(USER).is_empty());

    // First use of USER: nothing is parked in it yet.
    let first = start(&rt, USER);
    rt.destroy(&first).expect("destroy");
    wait_for("an init parked in USER", || {
        rt.warm_inits_parked_in(USER).len() == 1
    });
    let parked: HashSet<i32> = rt.warm_inits_parked_in(USER).into_iter().collect();

    // Neither another image (sharing its lower layers) nor `default` takes it.
    let good = start(&rt, GOOD);
    assert!(!parked.contains(&good.agent_pid), "GOOD took USER's init");
    let listing = sh_ok(&good, "cat /etc/greeting; ls /");
    assert!(listing.contains("hello from the image"), "{listing}");
    assert!(
        !listing.contains("probe"),
        "GOOD sees USER's files: {listing}"
    );
    let default = start(&rt, "default");
    assert!(
        !parked.contains(&default.agent_pid),
        "default took USER's init"
    );
    let (_, host_python) = agent_sh(&default, "test -x /usr/bin/python3 && echo yes");
    assert_eq!(host_python.trim(), "yes", "default has the host's /usr");

    // USER again: served by the init parked in its root, which is USER's root.
    let (hits, _) = Runtime::warm_pool(&*rt)
        .map(|s| (s.hits, s.misses))
        .expect("pool");
    let user = start(&rt, USER);
    assert!(
        parked.contains(&user.agent_pid),
        "USER's start did not take the init parked in USER"
    );
    assert!(user.warm);
    assert_eq!(Runtime::warm_pool(&*rt).expect("pool").hits, hits + 1);
    // (The image has bash, cat and ls only.)
    let inside = sh_ok(
        &user,
        "cat /etc/greeting /etc/passwd; test -x /probe && echo probe; \
         test -e /usr/bin/python3 || echo no-host-usr; cat /proc/sys/kernel/hostname",
    );
    assert_eq!(
        inside,
        "hello from the image\nroot:x:0:0:root:/root:/bin/bash\n\
         app:x:1234:2345::/home/app:/bin/bash\nprobe\nno-host-usr\nbox\n"
    );
    for h in [good, default, user] {
        rt.destroy(&h).expect("destroy");
    }
    // GOOD was started on its own too: both images keep an init parked now.
    wait_for("inits parked in both images", || {
        rt.warm_inits_parked_in(USER).len() == 1 && rt.warm_inits_parked_in(GOOD).len() == 1
    });

    // A drain (the server's shutdown) leaves nothing of them.
    let layers: Vec<String> = [USER, GOOD]
        .iter()
        .flat_map(|i| image_layers(&rt, i))
        .collect();
    rt.drain_warm_inits();
    assert_eq!(warm_dirs(data.path()), Vec::<String>::new());
    assert_eq!(mounts_under(data.path()), Vec::<String>::new());
    assert_eq!(mounts_of_layers(data.path(), &layers), Vec::<String>::new());
    assert_eq!(slot_leases(data.path()), Vec::<String>::new());
    for parent in rt.cgroups().dirs(uuid::Uuid::nil()) {
        let parent = parent.parent().expect("parent").to_path_buf();
        let children = std::fs::read_dir(&parent)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.path().is_dir())
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(children, 0, "cgroups left under {}", parent.display());
    }
}

#[test]
fn removing_an_image_drops_its_parked_init_and_its_layers_go() {
    let data = tempfile::tempdir().expect("tempdir");
    let _layouts = import_images(data.path());
    let rt = warm_runtime(data.path(), 1);
    rt.fill_warm_inits(0, false);
    let user_layers = image_layers(&rt, USER);
    let good_layers: HashSet<String> = image_layers(&rt, GOOD).into_iter().collect();
    let only_user: Vec<String> = user_layers
        .iter()
        .filter(|l| !good_layers.contains(*l))
        .cloned()
        .collect();
    assert_eq!(only_user.len(), 1, "USER's accounts layer is its own");
    let first = start(&rt, USER);
    rt.destroy(&first).expect("destroy");
    wait_for("an init parked in USER", || {
        rt.warm_inits_parked_in(USER).len() == 1
    });
    assert!(
        !mounts_of_layers(data.path(), &only_user).is_empty(),
        "USER's root is mounted"
    );

    // `images rm` (another process, as beside a server): the entry goes, the layer too.
    let out = sandboxd(data.path(), &["images", "rm", USER, "--grace-seconds", "0"]);
    assert!(out.status.success(), "{}", registry::text(&out));
    assert_eq!(rt.warm_inits_parked_in(USER), Vec::<i32>::new());
    assert_eq!(
        mounts_of_layers(data.path(), &only_user),
        Vec::<String>::new()
    );
    for layer in &only_user {
        assert!(
            !data.path().join("layers").join(layer).exists(),
            "layer {layer} of the removed image kept"
        );
    }
    // The layers GOOD shares stay, and GOOD still starts.
    for layer in &good_layers {
        assert!(data.path().join("layers").join(layer).is_dir());
    }
    let good = start(&rt, GOOD);
    assert!(sh_ok(&good, "cat /etc/greeting").contains("hello"));
    rt.destroy(&good).expect("destroy");
    // A start of the removed image is refused.
    assert!(rt.start(&spec(USER)).is_err());
}

/// Inodes of the warm entries' dirs, ready to be taken, whose layers are exactly
/// `digests` (top first).
fn parked_dirs(data: &Path, digests: &[String]) -> HashSet<u64> {
    let want = digests.join("\n") + "\n";
    std::fs::read_dir(data.join("sandboxes"))
        .expect("sandboxes")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".warm-"))
        .filter(|e| std::fs::read_to_string(e.path().join("layers")).ok() == Some(want.clone()))
        .filter(|e| e.path().join("ready").exists())
        .filter_map(|e| e.metadata().ok().map(|m| m.ino()))
        .collect()
}

#[test]
fn a_warm_image_create_gets_the_images_user_env_and_workdir() {
    let data = tempfile::tempdir().expect("tempdir");
    let _layouts = import_images(data.path());
    let top_first: Vec<String> = {
        let rt = runtime(data.path());
        image_layers(&rt, USER).into_iter().rev().collect()
    };
    let or = openrelay::Or::start(data.path(), &[("SANDBOXD_NETWORK", "none")]);
    let create = || {
        or.create(&serde_json::json!({ "template": USER }))["id"]
            .as_str()
            .expect("id")
            .to_owned()
    };
    let first = create();
    or.delete(&first);
    wait_for("an init parked in USER", || {
        !parked_dirs(data.path(), &top_first).is_empty()
    });
    let parked = parked_dirs(data.path(), &top_first);
    let id = create();
    let dir = data.path().join("sandboxes").join(&id);
    let ino = std::fs::metadata(&dir).expect("state dir").ino();
    assert!(
        parked.contains(&ino),
        "the create did not take the parked init"
    );
    let r = or.post(
        &format!("/v1/sandboxes/{id}/exec"),
        &serde_json::json!({"argv": ["/probe", "IMAGE_VAR", "HOME"]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["stdout"].as_str().expect("stdout"),
        "uid=1234 gid=2345 cwd=/srv/app groups=2345,3456\nIMAGE_VAR=from-image\nHOME=/home/app\n"
    );
    or.delete(&id);
    // The server's shutdown drains its warm inits, those parked in USER included.
    drop(or);
    assert_eq!(warm_dirs(data.path()), Vec::<String>::new());
    assert_eq!(mounts_under(data.path()), Vec::<String>::new());
}
