//! Host-side work in a sandbox's root never follows the root's symlinks out of it. An
//! image's `/etc` (or `/etc/resolv.conf`) that is a symlink aimed out of the root —
//! absolute, or climbing with `../..` — never makes the host write, chown or delete
//! anything outside the root when a sandbox starts with egress: cold, from a wired warm
//! entry, and on the gVisor tier; the sandbox still starts, its resolver config written
//! where the symlink leads *within its root*, or not at all. An image's `/usr` that is
//! a symlink to a host mount point is not unmounted on the host when the sandbox ends.
//! The symlinks aim at a directory (and a tmpfs) the test owns, never the host's own.

mod common;
mod registry;

use common::{raw_runtime, wait_for};
use registry::sandboxd;
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use sandboxd_runtime::linux::{LinuxConfig, LinuxRuntime, NetConfig};
use sandboxd_runtime::{NetworkSpec, Runtime, SandboxHandle};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const IMAGES: [&str; 4] = ["etc-abs", "etc-climb", "resolv-abs", "etc-inner"];
/// Every layout of `make_etc_links.py`.
const LAYOUTS: [&str; 5] = ["etc-abs", "etc-climb", "resolv-abs", "etc-inner", "usr-abs"];
const RESOLVER: &str = "192.0.2.53";

/// Destroys every sandbox still on disk (network included), drains the warm entries
/// and drops the cgroup parent, e.g. after a failed assertion.
struct Cleanup<'a>(&'a LinuxRuntime);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for handle in self.0.stored_handles() {
            let _ = self.0.destroy(&handle);
        }
        self.0.drain_warm_inits();
        self.0.cgroups().remove_parent_if_unused();
    }
}

/// The test's host dir the images aim at (with one file, `resolv.conf`), and the data
/// dir with the images imported as `<layout>:v1`.
fn setup(work: &Path) -> (PathBuf, PathBuf) {
    let outside = work.join("outside");
    std::fs::create_dir(&outside).expect("outside");
    std::fs::write(outside.join("resolv.conf"), "host's\n").expect("host file");
    let layouts = work.join("layouts");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images_data/make_etc_links.py");
    registry::run(
        Command::new("python3")
            .arg(script)
            .arg(&layouts)
            .arg(&outside),
    );
    let data = work.join("data");
    std::fs::create_dir(&data).expect("data");
    for name in LAYOUTS {
        let dir = layouts.join(name);
        let image = format!("{name}:v1");
        let out = sandboxd(
            &data,
            &[
                "images",
                "import",
                dir.to_str().expect("utf-8"),
                "--name",
                &image,
            ],
        );
        assert!(out.status.success(), "{}", registry::text(&out));
    }
    (outside, data)
}

/// Nothing in `outside` changed: its one file, with its text, owner and kind.
fn assert_outside_untouched(outside: &Path, case: &str) {
    let names: Vec<_> = std::fs::read_dir(outside)
        .expect("outside")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        names,
        ["resolv.conf"],
        "{case}: files appeared outside the root"
    );
    let file = outside.join("resolv.conf");
    let meta = std::fs::symlink_metadata(&file).expect("stat");
    assert!(meta.is_file(), "{case}: the host file was replaced");
    assert_eq!(
        (meta.uid(), meta.gid()),
        (0, 0),
        "{case}: the host file was chowned"
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        "host's\n",
        "{case}: the host file was rewritten"
    );
}

/// The resolver config the host wrote in `handle`'s root, where image `image` puts
/// `/etc` within it (`None` where that is nowhere).
fn resolv_conf_in_root(handle: &SandboxHandle, image: &str) -> Option<String> {
    let root = handle.state_dir.join("rootfs");
    let file = match image {
        "resolv-abs" => root.join("etc/resolv.conf"),
        "etc-inner" => root.join("private/etc/resolv.conf"),
        _ => return None,
    };
    let meta = std::fs::symlink_metadata(&file).expect("resolv.conf in the root");
    assert!(meta.is_file(), "{image}: {} is no file", file.display());
    Some(std::fs::read_to_string(&file).expect("read"))
}

fn check_start(handle: &SandboxHandle, image: &str, outside: &Path, case: &str) {
    assert_outside_untouched(outside, case);
    if let Some(text) = resolv_conf_in_root(handle, image) {
        assert!(
            text.contains(&format!("nameserver {RESOLVER}")),
            "{case}: {text}"
        );
    }
}

fn net_config() -> NetConfig {
    let mut config = NetConfig::from_host();
    config.resolvers = vec![RESOLVER.parse().expect("resolver")];
    config
}

/// Starts `image` (`<layout>:v1`) with egress under `rt`, warm or not as `warm` says,
/// and checks: nothing outside changed, the resolver config is in the root where the
/// image's `/etc` leads, and the image's `/etc` link is not hidden; then destroys it.
fn start_and_check(rt: &LinuxRuntime, image: &str, outside: &Path, warm: bool, case: &str) {
    let case = format!("{image} {case}");
    let sb = rt
        .start_with_network(
            &common::spec(&format!("{image}:v1")),
            &NetworkSpec::egress(vec![]),
        )
        .unwrap_or_else(|e| panic!("{case}: start: {e}"));
    assert_eq!(sb.warm, warm, "{case}: warm");
    check_start(&sb, image, outside, &case);
    let etc = std::fs::symlink_metadata(sb.state_dir.join("rootfs/etc")).expect("etc");
    assert_eq!(
        etc.file_type().is_symlink(),
        image != "resolv-abs",
        "{case}: the sandbox's /etc is not the image's"
    );
    rt.destroy(&sb).expect("destroy");
    assert_outside_untouched(outside, &format!("{case} destroyed"));
}

#[test]
fn etc_symlinks_of_an_image_keep_resolv_conf_inside_the_root_cold() {
    let work = tempfile::tempdir().expect("tempdir");
    let (outside, data) = setup(work.path());
    let rt = LinuxRuntime::with_network(raw_runtime(&data), net_config());
    let _cleanup = Cleanup(&rt);
    for image in IMAGES {
        start_and_check(&rt, image, &outside, false, "cold");
    }
}

#[test]
fn etc_symlinks_of_an_image_keep_resolv_conf_inside_the_root_from_wired_warm_entries() {
    let work = tempfile::tempdir().expect("tempdir");
    let (outside, data) = setup(work.path());
    let rt = LinuxRuntime::with_network(raw_runtime(&data), net_config()).with_warm_inits(1);
    let _cleanup = Cleanup(&rt);
    rt.fill_warm_inits(0, true);
    for (n, image) in IMAGES.into_iter().enumerate() {
        // The first start of the image takes the wired entry kept without a root (its
        // root mounted at the start), once the pool holds it beside the default image's
        // and those parked in the last images (2 by default) so far.
        wait_for("the wired entry without a root", || {
            rt.warm_inits_held() >= 2 + n.min(2)
        });
        start_and_check(&rt, image, &outside, true, "warm, mounted at the start");
        // The next takes an entry wired and parked in the image (mounted ahead).
        wait_for("a warm entry in the image", || {
            !rt.warm_inits_parked_in(&format!("{image}:v1")).is_empty()
        });
        start_and_check(&rt, image, &outside, true, "warm, parked in the image");
    }
}

/// The gVisor tier over `data` (its cgroup parent named after `work`), with egress.
fn gvisor(work: &Path, data: &Path) -> GvisorRuntime {
    GvisorRuntime::new(LinuxConfig {
        data_dir: data.to_path_buf(),
        init_exe: env!("CARGO_BIN_EXE_sandboxd").into(),
        init_args: vec!["__sandbox-init".into()],
        cgroup_parent: common::own_cgroups::parent_for(work),
        max_ptys_per_sandbox: sandboxd_runtime::linux::DEFAULT_MAX_PTYS,
    })
    .expect("gvisor runtime")
    .with_network(net_config())
}

/// Destroys what a failed gVisor test left and drops its cgroup parent.
struct GvisorCleanup<'a>(&'a GvisorRuntime);

impl Drop for GvisorCleanup<'_> {
    fn drop(&mut self) {
        for handle in self.0.stored_handles() {
            let _ = self.0.destroy(&handle);
        }
        self.0.cgroups().remove_parent_if_unused();
    }
}

#[test]
fn etc_symlinks_of_an_image_keep_resolv_conf_inside_the_root_on_gvisor() {
    if !GvisorRuntime::available() {
        eprintln!("runsc is not installed: skipping");
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    let (outside, data) = setup(work.path());
    let rt = gvisor(work.path(), &data);
    let _cleanup = GvisorCleanup(&rt);
    let egress = NetworkSpec::egress(vec![]);
    for image in IMAGES {
        let name = format!("{image}:v1");
        let sb = rt
            .start_with_network(&common::spec(&name), &egress)
            .unwrap_or_else(|e| panic!("{image}: gVisor start: {e}"));
        check_start(&sb, image, &outside, &format!("{image} gVisor"));
        rt.destroy(&sb).expect("destroy");
        assert_outside_untouched(&outside, &format!("{image} gVisor destroyed"));
    }
}

/// A tmpfs the test mounts at `dir` (with a file `mark`), unmounted when dropped.
struct OwnMount(PathBuf);

impl OwnMount {
    fn new(dir: PathBuf) -> OwnMount {
        std::fs::create_dir(&dir).expect("mount point");
        registry::run(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=64k", "own"])
                .arg(&dir),
        );
        let mount = OwnMount(dir);
        std::fs::write(mount.0.join("mark"), "here\n").expect("mark");
        mount
    }

    fn is_mounted(&self) -> bool {
        let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let dir = self.0.display().to_string();
        info.lines()
            .any(|l| l.split(' ').nth(4) == Some(dir.as_str()))
    }
}

impl Drop for OwnMount {
    fn drop(&mut self) {
        while self.is_mounted() {
            if nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH).is_err() {
                break;
            }
        }
    }
}

fn assert_mount_kept(mount: &OwnMount, case: &str) {
    assert!(
        mount.is_mounted(),
        "{case}: the host's mount under the image's /usr symlink was unmounted"
    );
    assert_eq!(
        std::fs::read_to_string(mount.0.join("mark"))
            .ok()
            .as_deref(),
        Some("here\n"),
        "{case}"
    );
}

#[test]
fn a_usr_symlink_to_a_host_mount_is_not_unmounted_when_the_sandbox_ends() {
    let work = tempfile::tempdir().expect("tempdir");
    let (outside, data) = setup(work.path());
    let mount = OwnMount::new(outside.join("mnt"));
    let rt = raw_runtime(&data);
    let _cleanup = Cleanup(&rt);
    let sb = rt.start(&common::spec("usr-abs:v1")).expect("start");
    rt.destroy(&sb).expect("destroy");
    assert_mount_kept(&mount, "container tier");
    if GvisorRuntime::available() {
        let rt = gvisor(work.path(), &data);
        let _cleanup = GvisorCleanup(&rt);
        let sb = rt.start(&common::spec("usr-abs:v1")).expect("gVisor start");
        rt.destroy(&sb).expect("gVisor destroy");
        assert_mount_kept(&mount, "gVisor tier");
    }
}
