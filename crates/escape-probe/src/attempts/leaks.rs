//! What a sandbox must not hold or see: descriptors it did not ask for (an inherited
//! directory of the host, a pipe of the server) and host paths or ids in the kernel's
//! views of its own mounts and sockets.

use crate::report::{errno_name, Attempt};
use crate::targets::Targets;
use std::os::fd::RawFd;

/// Files that describe the sandbox's mounts and sockets to itself.
const VIEWS: [&str; 5] = [
    "/proc/self/mountinfo",
    "/proc/self/mounts",
    "/proc/net/unix",
    "/proc/1/mountinfo",
    "/proc/self/cgroup",
];

pub fn attempts(t: &Targets) -> Vec<Attempt> {
    let mut out = vec![descriptors()];
    for view in VIEWS {
        out.push(host_strings_in(view, &t.host_strings));
    }
    out
}

/// Every descriptor above 2 still open once the listing's own is closed.
fn descriptors() -> Attempt {
    let what = "hold a descriptor above 2 (inherited from the agent, server or its parent)";
    let listed: Vec<RawFd> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        Err(e) => return Attempt::escaped(what, format!("cannot list: {}", errno_name(e))),
    };
    let open: Vec<String> = listed
        .into_iter()
        .filter(|fd| *fd > 2)
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        .filter(|fd| unsafe { libc::fcntl(*fd, libc::F_GETFD) } >= 0)
        .map(|fd| {
            let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
                .map(|p| p.display().to_string())
                .unwrap_or_else(errno_name);
            format!("{fd} -> {target}")
        })
        .collect();
    if open.is_empty() {
        Attempt::refused(what, "only 0-2 are open")
    } else {
        Attempt::escaped(what, open.join(", "))
    }
}

/// Whether `view` names any of the host's strings (its data dir, sandbox ids).
fn host_strings_in(view: &str, needles: &[String]) -> Attempt {
    let what = format!("read host paths or ids in {view}");
    let text = match std::fs::read_to_string(view) {
        Ok(text) => text,
        Err(e) => return Attempt::refused(what, errno_name(e)),
    };
    let found: Vec<&str> = needles
        .iter()
        .filter(|n| !n.is_empty() && text.contains(n.as_str()))
        .map(String::as_str)
        .collect();
    match found.is_empty() {
        true if needles.is_empty() => Attempt::refused(what, "skipped: no host strings given"),
        true => Attempt::refused(what, "none found"),
        false => {
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| found.iter().any(|n| l.contains(n)))
                .take(3)
                .collect();
            Attempt::escaped(what, lines.join(" | "))
        }
    }
}
