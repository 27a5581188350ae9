//! Hardening applied to every command a sandbox runs: no_new_privs, a Docker-like
//! capability set, a seccomp allowlist, and no inherited descriptors above 2.
//!
//! Everything that allocates (the BPF programs, the capability plan) is computed by
//! [`prepare`] in the parent; [`Prepared::apply`] only issues syscalls, so it is safe to
//! call in a freshly forked child just before `exec`.

mod capabilities;
pub mod descriptors;
mod seccomp;
mod seccomp_tree;
mod syscalls;

pub use capabilities::DEFAULT_CAPABILITIES;

use std::io;
use std::sync::OnceLock;

/// Why confinement could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// This CPU architecture has no syscall table here.
    #[error("unsupported architecture {0}")]
    UnsupportedArch(String),
    /// seccompiler rejected the filter.
    #[error("cannot build the seccomp filter")]
    Seccomp(#[source] seccompiler::BackendError),
    /// seccompiler could not compile the filter to BPF.
    #[error("cannot compile the seccomp filter")]
    Compile(#[source] seccompiler::Error),
    /// seccompiler's program is not of the shape the syscall search extends.
    #[error("unexpected seccomp program: {0}")]
    Shape(&'static str),
    /// The current capability sets could not be read.
    #[error("cannot read the current capabilities: {0}")]
    Caps(String),
}

/// Confinement computed ahead of time; apply it in the child right before `exec`.
#[derive(Debug, Clone)]
pub struct Prepared {
    caps: capabilities::CapPlan,
    filters: seccomp::Filters,
}

/// Computes the capability plan and compiles the seccomp programs.
pub fn prepare() -> Result<Prepared, ConfineError> {
    Ok(Prepared {
        caps: capabilities::plan()?,
        filters: seccomp::build()?,
    })
}

impl Prepared {
    /// Sets no_new_privs, reduces capabilities, installs the seccomp filters, in that
    /// order. Only syscalls, no allocation on success: fit for a post-fork child.
    pub fn apply(&self) -> io::Result<()> {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        self.caps.apply()?;
        self.filters.apply()
    }
}

static GLOBAL: OnceLock<Result<Prepared, String>> = OnceLock::new();

/// Prepares the process-wide confinement once (call it in the parent before spawning).
pub fn prepare_global() -> Result<&'static Prepared, io::Error> {
    GLOBAL
        .get_or_init(|| prepare().map_err(|e| error_chain(&e)))
        .as_ref()
        .map_err(|msg| io::Error::other(msg.clone()))
}

/// Confines the calling process with the process-wide [`Prepared`] plan. Call
/// [`prepare_global`] in the parent first: otherwise the plan is built here, which
/// allocates (acceptable in a single-threaded parent, not after fork of a threaded one).
pub fn confine_current_process() -> io::Result<()> {
    prepare_global()?.apply()
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        cur = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscalls::DENIED;

    /// Forks, confines the child with `plan`, runs `check` there and returns its exit code.
    fn in_confined_child(plan: &Prepared, check: fn() -> i32) -> i32 {
        // SAFETY: the child only issues syscalls and exits with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = match plan.apply() {
                Ok(()) => check(),
                Err(_) => 100,
            };
            // SAFETY: terminate the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child we just forked.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(rc, pid);
        assert!(
            libc::WIFEXITED(status),
            "child did not exit normally: {status:#x}"
        );
        libc::WEXITSTATUS(status)
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[test]
    fn allowlist_never_contains_a_denied_syscall() {
        let allowed = seccomp::allowed_numbers();
        assert!(allowed.len() > 200);
        for nr in DENIED {
            assert!(!allowed.contains(nr), "syscall {nr} must be denied");
        }
        assert_eq!(prepare().map(|p| p.filters.count()).ok(), Some(4));
    }

    #[test]
    fn mount_is_refused_with_eperm() {
        let plan = prepare().expect("prepare");
        let code = in_confined_child(&plan, || {
            let (src, dst, fs) = (c"none", c"/tmp", c"tmpfs");
            // SAFETY: valid C strings; the call is expected to fail.
            let rc = unsafe {
                libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null())
            };
            if rc == -1 && errno() == libc::EPERM {
                0
            } else {
                1
            }
        });
        assert_eq!(code, 0);
    }

    #[test]
    fn only_the_documented_socket_families_and_netlink_protocols_open() {
        let plan = prepare().expect("prepare");
        let code = in_confined_child(&plan, || {
            let open = |family: i32, ty: i32, proto: i32| {
                // SAFETY: socket(2) with integer arguments; a descriptor is closed.
                let fd = unsafe { libc::socket(family, ty | libc::SOCK_CLOEXEC, proto) };
                if fd >= 0 {
                    // SAFETY: closing the descriptor just opened.
                    unsafe { libc::close(fd) };
                    0
                } else {
                    errno()
                }
            };
            let allowed = [
                (libc::AF_UNIX, libc::SOCK_STREAM, 0),
                (libc::AF_INET, libc::SOCK_STREAM, 0),
                (libc::AF_INET6, libc::SOCK_DGRAM, 0),
                (libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE),
                (libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_SOCK_DIAG),
            ];
            for (i, (family, ty, proto)) in allowed.into_iter().enumerate() {
                if open(family, ty, proto) != 0 {
                    return 10 + i as i32;
                }
            }
            // Refused by the filter itself, whatever the kernel was built with.
            let refused = [
                (libc::AF_VSOCK, libc::SOCK_STREAM, 0, libc::EAFNOSUPPORT),
                (libc::AF_XDP, libc::SOCK_RAW, 0, libc::EAFNOSUPPORT),
                (libc::AF_PACKET, libc::SOCK_RAW, 0, libc::EAFNOSUPPORT),
                (libc::AF_ALG, libc::SOCK_SEQPACKET, 0, libc::EAFNOSUPPORT),
                (libc::AF_KEY, libc::SOCK_RAW, 2, libc::EAFNOSUPPORT),
                (libc::AF_BLUETOOTH, libc::SOCK_RAW, 0, libc::EAFNOSUPPORT),
                (
                    libc::AF_NETLINK,
                    libc::SOCK_RAW,
                    libc::NETLINK_NETFILTER,
                    libc::EPROTONOSUPPORT,
                ),
                (
                    libc::AF_NETLINK,
                    libc::SOCK_RAW,
                    libc::NETLINK_XFRM,
                    libc::EPROTONOSUPPORT,
                ),
                (
                    libc::AF_NETLINK,
                    libc::SOCK_RAW,
                    libc::NETLINK_AUDIT,
                    libc::EPROTONOSUPPORT,
                ),
            ];
            for (i, (family, ty, proto, want)) in refused.into_iter().enumerate() {
                if open(family, ty, proto) != want {
                    return 30 + i as i32;
                }
            }
            // socketpair is held to the same list.
            let mut pair = [0; 2];
            // SAFETY: socketpair into our array; expected to fail.
            let rc = unsafe {
                libc::socketpair(libc::AF_VSOCK, libc::SOCK_STREAM, 0, pair.as_mut_ptr())
            };
            if rc != -1 || errno() != libc::EAFNOSUPPORT {
                return 50;
            }
            0
        });
        assert_eq!(code, 0);
    }

    #[test]
    fn user_namespaces_are_refused_but_other_unshare_flags_pass_the_filter() {
        let plan = prepare().expect("prepare");
        let code = in_confined_child(&plan, || {
            // SAFETY: plain syscalls with integer arguments.
            let newuser = unsafe { libc::unshare(libc::CLONE_NEWUSER) };
            if newuser != -1 || errno() != libc::EPERM {
                return 1;
            }
            // SAFETY: as above; CLONE_FILES alone is harmless.
            let files = unsafe { libc::unshare(libc::CLONE_FILES) };
            if files != 0 {
                return 2;
            }
            // SAFETY: clone3 with a null argument: the filter answers before the kernel.
            let c3 = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0) };
            if c3 != -1 || errno() != libc::ENOSYS {
                return 3;
            }
            0
        });
        assert_eq!(code, 0);
    }

    #[test]
    fn ordinary_syscalls_work_and_capabilities_are_reduced() {
        let plan = prepare().expect("prepare");
        let code = in_confined_child(&plan, || {
            // SAFETY: plain syscalls.
            unsafe {
                if libc::getpid() <= 0 {
                    return 1;
                }
                if libc::personality(0xffff_ffff) == -1 {
                    return 2;
                }
                if libc::personality(0x0040_0000) != -1 {
                    return 3; // READ_IMPLIES_EXEC is not on the list
                }
                if libc::prctl(
                    libc::PR_CAPBSET_READ,
                    caps::Capability::CAP_SYS_ADMIN.index() as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return 4;
                }
                if libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1 {
                    return 5;
                }
            }
            0
        });
        assert_eq!(code, 0);
    }

    #[test]
    fn a_shell_pipeline_runs_confined() {
        let plan = prepare().expect("prepare");
        let code = in_confined_child(&plan, || {
            let sh = c"/bin/sh";
            let script = c"x=$(echo hi | cat); test \"$x\" = hi && ls / >/dev/null && exit 7";
            let argv = [
                sh.as_ptr(),
                c"-c".as_ptr(),
                script.as_ptr(),
                std::ptr::null(),
            ];
            // SAFETY: NUL-terminated argv of valid C strings.
            unsafe { libc::execv(sh.as_ptr(), argv.as_ptr()) };
            99
        });
        assert_eq!(code, 7);
    }

    #[test]
    fn common_toolchains_run_confined() {
        let plan = prepare().expect("prepare");
        let code = in_confined_child(&plan, || {
            let bash = c"/usr/bin/bash";
            let script = c"set -e; d=$(mktemp -d); trap 'rm -rf \"$d\"' EXIT
                if command -v python3 >/dev/null; then
                  python3 -c 'import subprocess,threading,os; t=threading.Thread(target=print); t.start(); t.join(); assert subprocess.run([\"true\"]).returncode == 0' >/dev/null
                fi
                if command -v node >/dev/null; then
                  node -e 'require(\"child_process\").execFileSync(\"true\"); new Promise(r => setTimeout(r, 1))' >/dev/null
                fi
                if command -v gcc >/dev/null; then
                  printf 'int main(void){return 3;}' > \"$d/m.c\"; gcc -o \"$d/m\" \"$d/m.c\"
                  set +e; \"$d/m\"; test $? = 3 || exit 1; set -e
                fi
                exit 9";
            let argv = [
                bash.as_ptr(),
                c"-c".as_ptr(),
                script.as_ptr(),
                std::ptr::null(),
            ];
            // SAFETY: NUL-terminated argv of valid C strings.
            unsafe { libc::execv(bash.as_ptr(), argv.as_ptr()) };
            99
        });
        assert_eq!(code, 9);
    }
}
