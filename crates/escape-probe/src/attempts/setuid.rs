//! Escalation through setuid binaries, defeated by no_new_privs.

use super::cstr;
use crate::report::Attempt;
use std::io::Read;
use std::os::fd::FromRawFd;

const NOBODY: u32 = 65534;

pub fn attempts() -> Vec<Attempt> {
    vec![no_new_privs_flag(), setuid_copy()]
}

fn no_new_privs_flag() -> Attempt {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status
        .lines()
        .find(|l| l.starts_with("NoNewPrivs:"))
        .unwrap_or("NoNewPrivs: missing");
    let value = line.split_whitespace().nth(1).unwrap_or("");
    let what = "/proc/self/status NoNewPrivs is 1";
    if value == "1" {
        Attempt::refused(what, line.split_whitespace().collect::<Vec<_>>().join(" "))
    } else {
        Attempt::escaped(what, line.to_owned())
    }
}

/// Makes a setuid-root copy of `id`, drops to nobody, runs it: `id -u` must say nobody.
fn setuid_copy() -> Attempt {
    let what = "run a setuid-root copy of id as nobody";
    let copy = "/tmp/escape-probe-id";
    if let Err(e) = std::fs::copy("/usr/bin/id", copy) {
        return Attempt::escaped(what, format!("could not prepare the copy: {e}"));
    }
    let path = cstr(copy);
    // SAFETY: valid C string.
    let prepared =
        unsafe { libc::chown(path.as_ptr(), 0, 0) == 0 && libc::chmod(path.as_ptr(), 0o4755) == 0 };
    if !prepared {
        let _ = std::fs::remove_file(copy);
        return Attempt::escaped(
            what,
            "could not make the copy setuid root (test inconclusive)",
        );
    }
    let output = run_as_nobody(&path);
    let _ = std::fs::remove_file(copy);
    match output {
        Some(uid) if uid == NOBODY.to_string() => {
            Attempt::refused(what, format!("id -u printed {uid}"))
        }
        Some(uid) => Attempt::escaped(what, format!("id -u printed {uid:?}")),
        None => Attempt::escaped(what, "the copy did not run (test inconclusive)"),
    }
}

/// Forks, drops to nobody, execs `path -u` with stdout on a pipe; returns what it printed.
fn run_as_nobody(path: &std::ffi::CStr) -> Option<String> {
    let mut fds = [0; 2];
    // SAFETY: pipe fills two fds.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return None;
    }
    let (arg0, arg1) = (cstr("id"), cstr("-u"));
    let argv = [arg0.as_ptr(), arg1.as_ptr(), std::ptr::null()];
    // SAFETY: the child only calls async-signal-safe functions before exec or _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            libc::dup2(fds[1], 1);
            libc::close(fds[0]);
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                libc::_exit(3);
            }
            libc::execv(path.as_ptr(), argv.as_ptr());
            libc::_exit(4);
        }
    }
    // SAFETY: closes our copy of the write end; the read end becomes a File.
    unsafe { libc::close(fds[1]) };
    // SAFETY: fds[0] is ours and owned by the File from here on.
    let mut reader = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    let mut out = String::new();
    let _ = reader.read_to_string(&mut out);
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let ok = pid > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    ok.then(|| out.trim().to_owned())
}
