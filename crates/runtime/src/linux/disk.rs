//! Per-sandbox disk limit: the overlay's upper and work dirs live on an ext4 image of the
//! limit's size, loop-mounted at `<state>/layer`, so filling the writable layer is
//! ENOSPC inside the sandbox and touches neither the host nor other sandboxes.
//!
//! The host data dir (ext4 without project quotas here) cannot bound a directory, so each
//! sandbox gets a sparse image copied (holes kept, about 4 MiB of metadata) from an
//! ext4 template formatted once per size. The loop device is configured with
//! `LO_FLAGS_AUTOCLEAR`: it detaches itself when the last mount of it goes away. The
//! layer is mounted with `discard`, so space freed inside returns to the host.

use super::io;
use crate::RuntimeError;
use nix::mount::{mount, MsFlags};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
/// How long destroy waits for the kernel to release a sandbox's loop device.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// `struct loop_info64` of `<linux/loop.h>`.
#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    sizelimit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

/// `struct loop_config` of `<linux/loop.h>`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// Directory holding the writable layer (`upper/`, `work/`); a mount point when limited.
pub fn layer_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("layer")
}

/// File name of a sandbox's layer image in its state dir.
pub const IMAGE_NAME: &str = "layer.img";

fn image(state_dir: &Path) -> PathBuf {
    state_dir.join(IMAGE_NAME)
}

/// Mount options of the layer's ext4 (see [`mount_limited`]).
pub const LAYER_MOUNT_OPTIONS: &str = "discard,nobarrier";

/// File in the state dir naming the loop device the image was attached to (`loopN`), so
/// that destroy checks that one device instead of scanning every `/sys/block/loop*`.
const DEVICE_NAME: &str = "layer.loop";

/// Gives the sandbox a `disk_mb` MiB writable layer: copies the template image of that
/// size (formatting it the first time) and loop-mounts it on [`layer_dir`].
pub fn mount_limited(data_dir: &Path, state_dir: &Path, disk_mb: u32) -> Result<(), RuntimeError> {
    let template = template(data_dir, disk_mb)?;
    let img = image(state_dir);
    let attached = super::disk_spares::claim(&template).and_then(|spare| {
        attach_spare(spare, &img)
            .inspect_err(|e| tracing::debug!(error = %e, "a spare disk did not attach; copying"))
            .ok()
    });
    super::disk_spares::refill(&template);
    let device = match attached {
        Some(device) => device,
        None => {
            copy_sparse(&template, &img).map_err(io("copying the disk image", &img))?;
            attach(&img).map_err(io("attaching a loop device", &img))?
        }
    };
    mount_device(state_dir, device)
}

/// Attaches the claimed `spare` as it is (written back whole, its inode too: the fsync
/// `LOOP_CONFIGURE` makes of its backing file then has nothing to write but the
/// host disk's flush), then moves it to `img`. Moved first, its inode's new change time
/// was written synchronously in that fsync: ~0.8 ms more on each start's path.
fn attach_spare(
    spare: super::disk_spares::Claimed,
    img: &Path,
) -> std::io::Result<(File, PathBuf)> {
    let device = attach_backing(spare.file(), img)?;
    // Refused (the spare was removed meanwhile), the device goes: nothing is mounted
    // on it, and with autoclear it detaches when closed.
    spare.move_to(img)?;
    Ok(device)
}

/// Loop-mounts a sandbox's existing disk image on [`layer_dir`] again: after a host
/// restart, which took the mount and the loop device, of a sandbox whose memory stayed
/// on disk (gVisor). Does nothing when the layer is mounted.
pub fn remount(state_dir: &Path) -> Result<(), RuntimeError> {
    let img = image(state_dir);
    if super::sys::is_mount_point(&layer_dir(state_dir)) {
        return Ok(());
    }
    mount_image(state_dir, &img)
}

/// Whether the sandbox has a disk of its own (an image in its state dir).
pub fn has_image(state_dir: &Path) -> bool {
    image(state_dir).is_file()
}

/// Attaches `img` to a loop device, records which, and mounts it on [`layer_dir`].
fn mount_image(state_dir: &Path, img: &Path) -> Result<(), RuntimeError> {
    let device = attach(img).map_err(io("attaching a loop device", img))?;
    mount_device(state_dir, device)
}

/// Records which loop device `device` is and mounts it on [`layer_dir`].
fn mount_device(state_dir: &Path, device: (File, PathBuf)) -> Result<(), RuntimeError> {
    let name = device.1.file_name().unwrap_or_default();
    let record = state_dir.join(DEVICE_NAME);
    std::fs::write(&record, name.as_encoded_bytes())
        .map_err(io("recording the loop device", &record))?;
    let dir = layer_dir(state_dir);
    std::fs::create_dir_all(&dir).map_err(io("creating the layer dir", &dir))?;
    let flags = MsFlags::MS_NOATIME | MsFlags::MS_NODEV;
    // The mount holds the device; with autoclear it detaches when unmounted. `discard`
    // punches the blocks a sandbox frees out of its sparse image, so deleted files give
    // their space back to the host. `nobarrier`: the layer does not outlive the host (its
    // image is journal-less already), so its flushes need not reach the host's disk;
    // with barriers every unmount (each destroy) waited for an fsync of the image.
    mount(
        Some(device.1.as_path()),
        &dir,
        Some("ext4"),
        flags,
        Some(LAYER_MOUNT_OPTIONS),
    )
    .map_err(|source| RuntimeError::Sys {
        what: "mounting the sandbox disk",
        source,
    })?;
    drop(device.0);
    Ok(())
}

/// The pre-formatted sparse ext4 image of `disk_mb` MiB, made once and renamed into
/// place. Journal-less (the layer does not outlive the host) and without the blocks
/// reserved for online resizing (nothing resizes a sandbox disk): a 10 GiB template then
/// holds 0.2 MB of data instead of 4.2 MB, and that is what every spare copies. It holds
/// the overlay's `upper` and `work` dirs already (`mkfs.ext4 -d`, root's, 0755, no
/// extended attributes): made on each fresh disk, they cost its start ~0.8 ms here (the
/// first allocation on a new filesystem reads its bitmaps through the loop device). An
/// `mkfs.ext4` that cannot (older e2fsprogs) makes it without them, as before: the
/// start then makes them. Its inode tables are marked zeroed: `mkfs.ext4` discards
/// the image first (punching holes in a sparse file, instant; asked for explicitly, as
/// a host's `mke2fs.conf` may turn discards off) and, as a file's holes read as zeros,
/// marks every group's table zeroed instead of leaving it to the kernel's lazy init,
/// which otherwise zeroed each mounted sandbox disk's 80 tables (10 GiB) through its
/// loop device in the background and dirtied their descriptors. Where the host's
/// filesystem cannot punch holes, the tables stay unmarked, as before.
fn template(data_dir: &Path, disk_mb: u32) -> Result<PathBuf, RuntimeError> {
    let dir = data_dir.join("disk-templates");
    let path = dir.join(format!("{disk_mb}mb-{TEMPLATE_FORMAT}.img"));
    if path.exists() {
        return Ok(path);
    }
    super::private_dir::ensure(&dir)?;
    remove_old_templates(&dir, disk_mb);
    remove_stale_makings(&dir);
    let id = uuid::Uuid::new_v4();
    let tmp = dir.join(format!(".{disk_mb}.{id}.tmp"));
    // What the filesystem starts with: the two empty dirs, 0755 whatever the umask.
    let tree = dir.join(format!(".{disk_mb}.{id}.tree"));
    let tree_made = ["upper", "work"].iter().try_for_each(|d| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(tree.join(d))?;
        std::fs::set_permissions(tree.join(d), std::fs::Permissions::from_mode(0o755))
    });
    let made = File::create(&tmp)
        .and_then(|f| f.set_len(u64::from(disk_mb) << 20))
        .and_then(|()| match tree_made {
            Ok(()) => format(&tmp, Some(&tree)).or_else(|e| {
                tracing::debug!(error = %e, "a disk template without the overlay's dirs");
                format(&tmp, None)
            }),
            Err(_) => format(&tmp, None),
        });
    let _ = std::fs::remove_dir_all(&tree);
    let made = made.and_then(|()| std::fs::rename(&tmp, &path));
    if made.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    made.map_err(io("formatting a disk template", &path))?;
    Ok(path)
}

/// Formats `image` (see [`template`]), with `tree`'s contents when given.
fn format(image: &Path, tree: Option<&Path>) -> std::io::Result<()> {
    let mut cmd = Command::new("mkfs.ext4");
    cmd.args(["-q", "-F", "-m", "0", "-O", "^has_journal,^resize_inode"]);
    match tree {
        Some(tree) => {
            cmd.args([
                "-E",
                "discard,lazy_itable_init=1,no_copy_xattrs,root_owner=0:0",
                "-d",
            ]);
            cmd.arg(tree);
        }
        None => {
            cmd.args(["-E", "discard,lazy_itable_init=1"]);
        }
    }
    let out = cmd.arg(image).output()?;
    match out.status.success() {
        true => Ok(()),
        false => Err(std::io::Error::other(format!(
            "mkfs.ext4 failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// Removes what a process killed while making a template left (a dot name ending in
/// `.tmp` or `.tree`, older than a minute: a live making is younger).
fn remove_stale_makings(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let making = name.starts_with('.') && (name.ends_with(".tmp") || name.ends_with(".tree"));
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() > 60);
        if making && stale {
            let path = entry.path();
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        }
    }
}

/// The name part of the current template format (`<mb>mb-v4.img`).
const TEMPLATE_FORMAT: &str = "v4";

/// Best effort: the earlier formats' templates of `disk_mb` (`<mb>.img`, with a
/// resize reserve; `<mb>mb-v2.img`, without the overlay's dirs; `<mb>mb-v3.img`, its
/// inode tables not marked zeroed) and their spares, which no start takes any more.
fn remove_old_templates(dir: &Path, disk_mb: u32) {
    let olds = ["", "mb-v2", "mb-v3"].map(|format| format!("{disk_mb}{format}.img"));
    for old in olds {
        super::disk_spares::remove_with_spares(&dir.join(old));
    }
}

/// Copies `from` to `to` keeping holes (SEEK_DATA/SEEK_HOLE + copy_file_range).
pub(super) fn copy_sparse(from: &Path, to: &Path) -> std::io::Result<()> {
    let src = File::open(from)?;
    let dst = OpenOptions::new().write(true).create_new(true).open(to)?;
    let len = src.metadata()?.len();
    dst.set_len(len)?;
    let mut off: i64 = 0;
    while (off as u64) < len {
        // SAFETY: lseek on an open fd.
        let data = unsafe { libc::lseek(src.as_raw_fd(), off, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::ENXIO) {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: lseek on an open fd.
        let hole = unsafe { libc::lseek(src.as_raw_fd(), data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (mut from_off, mut to_off) = (data, data);
        while from_off < hole {
            let want = (hole - from_off) as usize;
            // SAFETY: offsets point at live i64s; both fds are open.
            let n = unsafe {
                libc::copy_file_range(
                    src.as_raw_fd(),
                    &mut from_off,
                    dst.as_raw_fd(),
                    &mut to_off,
                    want,
                    0,
                )
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                break;
            }
        }
        off = hole;
    }
    Ok(())
}

/// Serialises this process's attaches: `LOOP_CTL_GET_FREE` hands every caller the same
/// unbound device until one of them configures it, so a burst of concurrent attaches
/// would mostly lose races (measured: 6-18 of 120 concurrent starts failed after 16
/// tries each). Taking turns costs little: both ioctls take microseconds.
static ATTACHING: Mutex<()> = Mutex::new(());
/// How long an attach keeps retrying devices other processes take first.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `img` to a free loop device with autoclear; returns the open device and its
/// path. `/dev/loop-control` makes a new device when none is free.
fn attach(img: &Path) -> std::io::Result<(File, PathBuf)> {
    let backing = OpenOptions::new().read(true).write(true).open(img)?;
    attach_backing(&backing, img)
}

/// [`attach`] of the open `backing`, named `img` in the device's status.
fn attach_backing(backing: &File, img: &Path) -> std::io::Result<(File, PathBuf)> {
    let ctl = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")?;
    let _turn = ATTACHING.lock().unwrap_or_else(|p| p.into_inner());
    let deadline = Instant::now() + ATTACH_TIMEOUT;
    let mut lost = 0u32;
    loop {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        match configure(n, backing, img) {
            Ok(attached) => return Ok(attached),
            // Another process (losetup, another server) took it between GET_FREE and
            // CONFIGURE: take the next one, backing off a little when that repeats.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                lost += 1;
                if lost > 4 {
                    std::thread::sleep(Duration::from_micros(200 * u64::from(lost.min(50))));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Configures `/dev/loop<n>` over `backing` with autoclear.
fn configure(n: i32, backing: &File, img: &Path) -> std::io::Result<(File, PathBuf)> {
    let path = PathBuf::from(format!("/dev/loop{n}"));
    let dev = OpenOptions::new().read(true).write(true).open(&path)?;
    // SAFETY: LoopConfig is plain old data; all-zero is its documented default.
    let mut config: LoopConfig = unsafe { std::mem::zeroed() };
    config.fd = backing.as_raw_fd() as u32;
    config.info.flags = LO_FLAGS_AUTOCLEAR;
    let name = img.as_os_str().as_encoded_bytes();
    let len = name.len().min(63);
    config.info.file_name[..len].copy_from_slice(&name[..len]);
    // SAFETY: LOOP_CONFIGURE reads a loop_config we own.
    match unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE as _, &config) } {
        0 => Ok((dev, path)),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Loop devices whose backing file is `img` (`/sys/block/loopN/loop/backing_file`).
pub fn devices_backed_by(img: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("loop") && is_backed_by(name, img))
        .collect()
}

/// Whether `/dev/<device>` is bound to `img` now.
fn is_backed_by(device: &str, img: &Path) -> bool {
    let want = img.display().to_string();
    let path = Path::new("/sys/block")
        .join(device)
        .join("loop/backing_file");
    let file = std::fs::read_to_string(path).unwrap_or_default();
    let file = file.trim_end();
    file == want || file.strip_suffix(" (deleted)") == Some(want.as_str())
}

/// The loop devices holding the sandbox's image: the one recorded at attach when there
/// is a record (a sandbox's image is attached once), else a scan of all of them.
fn holders(state_dir: &Path, img: &Path) -> Vec<String> {
    match std::fs::read_to_string(state_dir.join(DEVICE_NAME)) {
        Ok(name) if name.starts_with("loop") && !name.contains('/') => {
            match is_backed_by(&name, img) {
                true => vec![name],
                false => Vec::new(),
            }
        }
        _ => devices_backed_by(img),
    }
}

/// After the layer is unmounted: waits until the kernel has released the image's loop
/// device (autoclear runs once the sandbox's mount namespace is gone), then deletes it,
/// so that its space is back when destroy returns; with `defer`, moves it to the trash
/// (see `disk_trash`) for the next runtime that opens the data dir to delete.
///
/// Known limit: a sandbox started while this one's disk was mounted holds a locked copy
/// of that mount under its detached host root (pinned by the agent's executable) until
/// it ends; the device then detaches itself (autoclear). Destroy does not wait for that:
/// it logs and deletes the image (the kernel keeps the inode until the device lets go).
pub fn release(state_dir: &Path, defer: bool) -> Result<(), RuntimeError> {
    let img = image(state_dir);
    if !img.exists() {
        return Ok(());
    }
    let deadline = Instant::now() + RELEASE_TIMEOUT;
    loop {
        let held = holders(state_dir, &img);
        if held.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            tracing::warn!(image = %img.display(), devices = ?held, "loop device still held by another sandbox's mount namespace; it detaches when that sandbox ends");
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if defer && super::disk_trash::discard(&img, &super::disk_trash::dir_of_state(state_dir)) {
        return Ok(());
    }
    std::fs::remove_file(&img).map_err(io("removing the disk image", &img))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_10_gib_template_holds_under_a_mib_of_data() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = template(dir.path(), 10240).expect("template");
        let held = std::fs::metadata(&path).expect("metadata").blocks() * 512;
        assert!(held < 1 << 20, "every spare copies {held} bytes");
    }

    /// Every block group's inode table is marked zeroed (the sparse image reads as
    /// zeros): the kernel's lazy init then has nothing to zero after each sandbox's
    /// mount (with the mark missing, it sent each of a 10 GiB disk's 80 inode tables
    /// through the loop device, and dirtied their descriptors, beside the sandbox).
    #[test]
    fn a_templates_inode_tables_are_marked_zeroed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = template(dir.path(), 10240).expect("template");
        let out = Command::new("dumpe2fs")
            .arg(&path)
            .output()
            .expect("dumpe2fs");
        assert!(out.status.success(), "dumpe2fs: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let groups: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("Group ") && l.contains(": (Blocks"))
            .collect();
        assert!(groups.len() >= 80, "{} groups: {text}", groups.len());
        let unzeroed: Vec<&&str> = groups
            .iter()
            .filter(|g| !g.contains("ITABLE_ZEROED"))
            .collect();
        assert!(unzeroed.is_empty(), "not marked zeroed: {unzeroed:?}");
    }

    #[test]
    fn the_old_format_and_its_spares_go_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let names = [
            "64.img",
            "64.img.spare-a",
            ".64.img.partial-b",
            "64mb-v2.img",
            "64mb-v2.img.spare-c",
            "64mb-v3.img",
            "64mb-v3.img.spare-e",
            "64mb-v4.img",
            "64mb-v4.img.spare-f",
            "640.img",
            "640.img.spare-d",
            "640mb-v2.img",
        ];
        for name in names {
            File::create(dir.path().join(name)).expect("create");
        }
        remove_old_templates(dir.path(), 64);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "640.img",
                "640.img.spare-d",
                "640mb-v2.img",
                "64mb-v4.img",
                "64mb-v4.img.spare-f"
            ]
        );
    }

    /// A template's filesystem holds the overlay's empty `upper` and `work` dirs, root's,
    /// its root is root's and 0755, and nothing of the tree it was made from is left.
    /// A default ACL as the kernel stores it (`system.posix_acl_default`): version 2,
    /// then (tag, perm, id) entries; `user` gets rwx.
    fn default_acl(user: u32) -> Vec<u8> {
        let mut acl = 2u32.to_le_bytes().to_vec();
        let none = u32::MAX;
        for (tag, perm, id) in [
            (1u16, 7u16, none),
            (2, 7, user),
            (4, 5, none),
            (16, 7, none),
            (32, 5, none),
        ] {
            acl.extend(tag.to_le_bytes());
            acl.extend(perm.to_le_bytes());
            acl.extend(id.to_le_bytes());
        }
        acl
    }

    #[test]
    fn a_template_holds_the_overlays_dirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A default ACL where templates are made (an admin's, inherited by every dir
        // made below) must not reach the sandboxes' upper dirs.
        let templates = dir.path().join("disk-templates");
        std::fs::create_dir(&templates).expect("dir");
        rustix::fs::setxattr(
            &templates,
            "system.posix_acl_default",
            &default_acl(4321),
            rustix::fs::XattrFlags::empty(),
        )
        .expect("setting a default ACL");
        let path = template(dir.path(), 64).expect("template");
        for d in ["upper", "work"] {
            let attrs = Command::new("debugfs")
                .args(["-R", &format!("ea_list {d}")])
                .arg(&path)
                .output()
                .expect("debugfs");
            let text = String::from_utf8_lossy(&attrs.stdout);
            assert!(!text.contains("posix_acl"), "{d} carries the ACL: {text}");
        }
        let listing = Command::new("debugfs")
            .args(["-R", "ls -l /"])
            .arg(&path)
            .output()
            .expect("debugfs");
        let text = String::from_utf8_lossy(&listing.stdout);
        for name in [".", "upper", "work", "lost+found"] {
            let line = text
                .lines()
                .find(|l| l.split_whitespace().last() == Some(name))
                .unwrap_or_else(|| panic!("no {name} in the template: {text}"));
            // `ls -l`: inode, mode (octal), (uid, gid, …: root's).
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields[1].starts_with("40"), "{name} is not a dir: {line}");
            if name != "lost+found" {
                assert_eq!(fields[1], "40755", "{name}: {line}");
            }
            assert_eq!(&fields[2..5], ["(2)", "0", "0"], "{name}: {line}");
        }
        let left: Vec<String> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["64mb-v4.img"]);
    }

    /// What a killed making left (older than a minute) goes; a live making's stays.
    #[test]
    fn a_killed_makings_files_go_and_a_live_ones_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(600);
        let (tmp, tree, live) = (
            dir.path().join(".64.a.tmp"),
            dir.path().join(".64.b.tree"),
            dir.path().join(".64.c.tmp"),
        );
        File::create(&tmp)
            .expect("tmp")
            .set_modified(old)
            .expect("age");
        std::fs::create_dir_all(tree.join("upper")).expect("tree");
        File::open(&tree)
            .expect("tree")
            .set_modified(old)
            .expect("age");
        File::create(&live).expect("live");
        File::create(dir.path().join("64mb-v4.img")).expect("template");
        remove_stale_makings(dir.path());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".64.c.tmp", "64mb-v4.img"]);
    }

    #[test]
    fn copy_sparse_keeps_data_and_holes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let f = File::create(&a).expect("create");
        f.set_len(64 << 20).expect("len");
        std::os::unix::fs::FileExt::write_at(&f, b"hello", 32 << 20).expect("write");
        copy_sparse(&a, &b).expect("copy");
        let bytes = std::fs::read(&b).expect("read");
        assert_eq!(bytes.len(), 64 << 20);
        assert_eq!(&bytes[32 << 20..(32 << 20) + 5], b"hello");
        let blocks = std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&b).expect("meta"));
        assert!(blocks < 1024, "copy is not sparse: {blocks} blocks");
    }
}
