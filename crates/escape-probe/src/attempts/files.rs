//! Host files, read-only image paths, kernel tunables and another sandbox's files.

use super::cstr;
use crate::report::Attempt;
use crate::targets::Targets;
use std::fs::OpenOptions;
use std::path::Path;

pub fn attempts(t: &Targets) -> Vec<Attempt> {
    let mut out = Vec::new();
    if let Some(marker) = &t.marker {
        out.push(read(marker, "read the host marker file"));
        out.push(chroot_breakout(marker));
    }
    for path in &t.other_paths {
        out.push(Attempt::from_io(
            format!("list another sandbox's host path {}", path.display()),
            std::fs::read_dir(path),
        ));
    }
    if let Some(file) = &t.other_file {
        out.push(read(file, "read another sandbox's file"));
    }
    out.push(Attempt::from_io(
        "create /usr/bin/escape-probe-write in the read-only image",
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open("/usr/bin/escape-probe-write"),
    ));
    out.push(Attempt::from_io(
        "open /usr/bin/id for writing",
        OpenOptions::new().write(true).open("/usr/bin/id"),
    ));
    let chmod = std::fs::set_permissions(
        "/usr/bin/id",
        std::os::unix::fs::PermissionsExt::from_mode(0o4755),
    );
    out.push(Attempt::from_io("chmod u+s /usr/bin/id", chmod));
    for path in [
        "/proc/sys/kernel/hostname",
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/vm/drop_caches",
        "/proc/sysrq-trigger",
        "/sys/kernel/uevent_helper",
        "/sys/power/state",
        "/sys/fs/cgroup/cgroup.procs",
    ] {
        // Opened for writing and closed unwritten: the open alone proves access.
        out.push(Attempt::from_io(
            format!("open {path} for writing"),
            OpenOptions::new().write(true).open(path),
        ));
    }
    out
}

fn read(path: &Path, what: &str) -> Attempt {
    match std::fs::read(path) {
        Ok(_) => Attempt::escaped(format!("{what} {}", path.display()), "read it"),
        Err(e) => Attempt::refused(
            format!("{what} {}", path.display()),
            crate::report::errno_name(e),
        ),
    }
}

/// The classic chroot escape: chroot into a subdir, climb out with `..`, chroot to it;
/// from the sandbox this climbs at most to the sandbox's own root.
fn chroot_breakout(marker: &Path) -> Attempt {
    let what = "chroot breakout (chroot, cd .. x64, chroot .) then read the host marker";
    // SAFETY: fork; the child only makes syscalls and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let jail = cstr("/tmp/escape-probe-jail");
        // SAFETY: valid C strings; the child exits without returning.
        unsafe {
            libc::mkdir(jail.as_ptr(), 0o700);
            if libc::chroot(jail.as_ptr()) != 0 {
                libc::_exit(2);
            }
            let up = cstr("..");
            for _ in 0..64 {
                libc::chdir(up.as_ptr());
            }
            libc::chroot(cstr(".").as_ptr());
            let found = std::fs::metadata(marker).is_ok();
            libc::_exit(if found { 1 } else { 0 });
        }
    }
    if pid < 0 {
        return Attempt::refused(what, "fork failed");
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let _ = std::fs::remove_dir("/tmp/escape-probe-jail");
    match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
        Some(0) => Attempt::refused(what, "climbed to the sandbox root only: marker absent"),
        Some(2) => Attempt::refused(what, "chroot refused"),
        _ => Attempt::escaped(what, format!("marker reachable (status {status})")),
    }
}
