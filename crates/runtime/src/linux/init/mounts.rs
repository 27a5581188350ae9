//! The sandbox's mount tree, made inside its own mount namespace: the overlay root bound
//! onto itself, fresh /proc and /sys, a minimal /dev, masked paths, then `pivot_root`.

use super::{step, InitError};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::path::Path;

const NONE: Option<&str> = None;
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];
const MASKED_FILES: [&str; 6] = [
    "proc/kcore",
    "proc/keys",
    "proc/timer_list",
    "proc/sched_debug",
    "proc/latency_stats",
    "proc/timer_stats",
];
const MASKED_DIRS: [&str; 3] = ["proc/acpi", "proc/scsi", "sys/firmware"];
const READ_ONLY: [&str; 4] = ["proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus"];
const LINKS: [(&str, &str); 5] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];

fn nosuid_nodev_noexec() -> MsFlags {
    MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> InitError {
    move |source| InitError::Io { what, source }
}

/// Stops mount events from propagating back to the host.
pub fn make_private() -> Result<(), InitError> {
    step(
        "making / rprivate",
        mount(NONE, "/", NONE, MsFlags::MS_REC | MsFlags::MS_PRIVATE, NONE),
    )
}

/// Binds `root` onto itself (pivot_root needs a mount) and makes it the cwd.
pub fn bind_root(root: &Path) -> Result<(), InitError> {
    step(
        "binding the root onto itself",
        mount(
            Some(root),
            root,
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            NONE,
        ),
    )?;
    step("chdir to the new root", nix::unistd::chdir(root))
}

/// Builds the tree under the cwd (see [`bind_root`]) and makes it `/`, leaving nothing
/// of the host visible; its devpts instance holds at most `max_ptys` (0: no own limit).
pub fn switch_root(max_ptys: u32) -> Result<(), InitError> {
    let root = Path::new(".");
    step(
        "mounting /proc",
        mount(
            Some("proc"),
            &root.join("proc"),
            Some("proc"),
            nosuid_nodev_noexec(),
            NONE,
        ),
    )?;
    step(
        "mounting /sys",
        mount(
            Some("sysfs"),
            &root.join("sys"),
            Some("sysfs"),
            nosuid_nodev_noexec() | MsFlags::MS_RDONLY,
            NONE,
        ),
    )?;
    dev(root, max_ptys)?;
    for rel in MASKED_FILES {
        let target = root.join(rel);
        if target.exists() {
            step(
                format!("masking /{rel}"),
                mount(
                    Some(&root.join("dev/null")),
                    &target,
                    NONE,
                    MsFlags::MS_BIND,
                    NONE,
                ),
            )?;
        }
    }
    for rel in MASKED_DIRS {
        let target = root.join(rel);
        if target.is_dir() {
            step(
                format!("masking /{rel}"),
                mount(
                    Some("tmpfs"),
                    &target,
                    Some("tmpfs"),
                    nosuid_nodev_noexec() | MsFlags::MS_RDONLY,
                    Some("size=0"),
                ),
            )?;
        }
    }
    for rel in READ_ONLY {
        let target = root.join(rel);
        if target.exists() {
            step(
                format!("binding /{rel}"),
                mount(
                    Some(&target),
                    &target,
                    NONE,
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    NONE,
                ),
            )?;
            let flags =
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | nosuid_nodev_noexec();
            step(
                format!("making /{rel} read-only"),
                mount(NONE, &target, NONE, flags, NONE),
            )?;
        }
    }
    pivot()
}

/// tmpfs /dev with the host's harmless character devices, devpts (a new instance, at
/// most `max_ptys` terminals), shm and the usual links.
fn dev(root: &Path, max_ptys: u32) -> Result<(), InitError> {
    let dev = root.join("dev");
    step(
        "mounting /dev",
        mount(
            Some("tmpfs"),
            &dev,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("mode=755,size=65536k"),
        ),
    )?;
    for name in DEVICES {
        let target = dev.join(name);
        std::fs::File::create(&target).map_err(io(format!("creating /dev/{name}")))?;
        let source = Path::new("/dev").join(name);
        step(
            format!("binding /dev/{name}"),
            mount(Some(&source), &target, NONE, MsFlags::MS_BIND, NONE),
        )?;
    }
    for dir in ["pts", "shm"] {
        std::fs::create_dir(dev.join(dir)).map_err(io(format!("creating /dev/{dir}")))?;
    }
    let mut pts_opts = "newinstance,ptmxmode=0666,mode=0620,gid=5".to_owned();
    if max_ptys > 0 {
        pts_opts.push_str(&format!(",max={max_ptys}"));
    }
    step(
        "mounting /dev/pts",
        mount(
            Some("devpts"),
            &dev.join("pts"),
            Some("devpts"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some(pts_opts.as_str()),
        ),
    )?;
    step(
        "mounting /dev/shm",
        mount(
            Some("shm"),
            &dev.join("shm"),
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777,size=65536k"),
        ),
    )?;
    for (name, target) in LINKS {
        std::os::unix::fs::symlink(target, dev.join(name))
            .map_err(io(format!("linking /dev/{name}")))?;
    }
    Ok(())
}

/// `pivot_root(".", ".")` then detach the old root stacked underneath.
fn pivot() -> Result<(), InitError> {
    step("pivot_root", nix::unistd::pivot_root(".", "."))?;
    step(
        "detaching the host root",
        umount2(".", MntFlags::MNT_DETACH),
    )?;
    step("chdir /", nix::unistd::chdir("/"))
}
