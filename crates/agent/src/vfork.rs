//! Starting a child with `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn` does: the
//! agent's address space is not copied (a `fork` of the agent costs page-table copies
//! and copy-on-write faults that grow with its mappings); the calling thread sleeps
//! until the child has called `execve` or given up. The child runs on a stack of its
//! own and issues only syscalls, so it touches nothing the parent relies on.

use std::ffi::{c_char, c_int, c_void, CString};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::{Mutex, OnceLock};

/// Stack of the child between `clone` and `execve` (a guard page sits below it), more
/// for long argument lists: execvpe copies argv onto it to run a script by /bin/sh.
const STACK_BYTES: usize = 128 * 1024;
const PAGE: usize = 4096;

/// A program with its argument and environment vectors, ready for `execve`.
pub(crate) struct Program {
    _strings: Vec<CString>,
    path: *const c_char,
    argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
    cwd: CString,
}

impl Program {
    /// `argv[0]` is the path run; `env` becomes the whole environment. A NUL byte
    /// anywhere is `InvalidInput` (callers validate first).
    pub fn new<'a>(
        argv: &[String],
        env: impl IntoIterator<Item = (&'a String, &'a String)>,
        cwd: &str,
    ) -> io::Result<Self> {
        let c = |s: String| CString::new(s).map_err(|_| io::ErrorKind::InvalidInput);
        let args = argv
            .iter()
            .map(|a| c(a.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let vars = env
            .into_iter()
            .map(|(k, v)| c(format!("{k}={v}")))
            .collect::<Result<Vec<_>, _>>()?;
        let path = args.first().ok_or(io::ErrorKind::InvalidInput)?.as_ptr();
        // CString contents live on the heap: moving the vectors keeps these pointers valid.
        let argv = args
            .iter()
            .map(|a| a.as_ptr())
            .chain([ptr::null()])
            .collect();
        let envp = vars
            .iter()
            .map(|v| v.as_ptr())
            .chain([ptr::null()])
            .collect();
        let mut strings = args;
        strings.extend(vars);
        Ok(Self {
            _strings: strings,
            path,
            argv,
            envp,
            cwd: c(cwd.to_owned())?,
        })
    }
}

/// What the child reads, and where it reports why it could not `execve`.
struct Job<'a> {
    program: &'a Program,
    stdio: [RawFd; 3],
    setup: &'a dyn Fn() -> io::Result<()>,
    /// The signals the child sets back to their default action (see [`to_default`]).
    to_default: &'a [c_int],
    errno: c_int,
}

/// Starts `program` with `stdio` as its descriptors 0, 1 and 2, in a new session (so
/// also its own process group), with default signal handling and an empty signal
/// mask; `setup` runs last before `execve` (raw syscalls only: no allocation, no
/// locks). Returns the child's PID once it has exec'd. A child that failed has been
/// reaped here, and its error is returned.
pub(crate) fn spawn(
    program: &Program,
    stdio: [RawFd; 3],
    setup: &dyn Fn() -> io::Result<()>,
) -> io::Result<libc::pid_t> {
    // A source among 0..=2 other than its own target could be overwritten by an
    // earlier dup2 in the child: such descriptors are duplicated above 2 first.
    let mut lifted = Vec::new();
    let mut stdio = stdio;
    for (target, fd) in stdio.iter_mut().enumerate() {
        if (0..3).contains(fd) && *fd != target as RawFd {
            // SAFETY: duplicating a descriptor the caller keeps open for this call.
            let dup = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 3) };
            if dup < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `dup` is a fresh descriptor owned by nobody else.
            lifted.push(unsafe { OwnedFd::from_raw_fd(dup) });
            *fd = dup;
        }
    }
    let need = STACK_BYTES + program.argv.len() * std::mem::size_of::<*const c_char>();
    let stack = Stack::take(need)?;
    let mut job = Job {
        program,
        stdio,
        setup,
        to_default: to_default(),
        errno: 0,
    };
    debug_assert_eq!(
        job.to_default,
        read_to_default().as_slice(),
        "a handler came late"
    );
    let pid = {
        // Signals stay blocked until the child has reset every handler: a handler of
        // the agent must never run on the child's stack in the shared address space.
        let _blocked = BlockedSignals::all()?;
        // SAFETY: `child_main` runs on `stack` and only reads `job` (and writes its
        // `errno`); CLONE_VFORK suspends this thread until the child exec'd or exited,
        // so `job` and `stack` outlive every use the child makes of them.
        unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                ptr::addr_of_mut!(job).cast(),
            )
        }
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    stack.put_back();
    // SAFETY: the child has exec'd or exited: nothing writes `errno` any more.
    let errno = unsafe { ptr::read_volatile(ptr::addr_of!(job.errno)) };
    if errno == 0 {
        return Ok(pid);
    }
    let mut status = 0;
    // SAFETY: reaping our own child, which has exited (it could not exec).
    unsafe { libc::waitpid(pid, &mut status, 0) };
    Err(io::Error::from_raw_os_error(errno))
}

/// The child: signals to default, descriptors, session, setup, exec. Any failure is
/// written to the job and ends the child with 127.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    let job = arg.cast::<Job<'_>>();
    // SAFETY: `arg` is the parent's `Job`, alive while the parent is suspended.
    let err = match unsafe { prepare_and_exec(&*job) } {
        Ok(never) => match never {},
        Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
    };
    // SAFETY: as above; the parent reads it only after we exit.
    unsafe {
        ptr::write_volatile(ptr::addr_of_mut!((*job).errno), err);
        libc::_exit(127)
    }
}

/// Runs in the child; returns only on failure.
///
/// # Safety
/// Only in a child made by `spawn`, with every signal blocked.
unsafe fn prepare_and_exec(job: &Job<'_>) -> io::Result<std::convert::Infallible> {
    let check = |rc: c_int| {
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: plain syscalls on descriptors and strings the job keeps alive.
    unsafe {
        default_signal_handlers(job.to_default);
        for (target, &fd) in job.stdio.iter().enumerate() {
            let target = target as c_int;
            if fd == target {
                check(libc::fcntl(fd, libc::F_SETFD, 0))?;
            } else {
                check(libc::dup2(fd, target))?;
            }
        }
        check(libc::chdir(job.program.cwd.as_ptr()))?;
        check(libc::setsid())?;
    }
    (job.setup)()?;
    // SAFETY: as above; the vectors are NUL-terminated and outlive the call.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        check(libc::sigprocmask(
            libc::SIG_SETMASK,
            &empty,
            ptr::null_mut(),
        ))?;
        // execvpe, as std's Command: a file without a `#!` line is run by /bin/sh.
        libc::execvpe(
            job.program.path,
            job.program.argv.as_ptr(),
            job.program.envp.as_ptr(),
        );
    }
    Err(io::Error::last_os_error())
}

/// The signals a child sets back to their default action: every signal the agent
/// catches, and SIGPIPE (which Rust programs ignore), as std's `Command` does; other
/// ignored signals stay ignored. Read once, in the agent, before it serves (or at its
/// first command), not in each child: a look at every signal is some 70 syscalls on the
/// path of every command's start. The agents install their handlers before that (the
/// reaper's SIGCHLD, std's own at process start, the gVisor agent's SIGUSR1/SIGUSR2);
/// debug builds check at each spawn that none came later.
fn to_default() -> &'static [c_int] {
    static CAUGHT: OnceLock<Vec<c_int>> = OnceLock::new();
    CAUGHT.get_or_init(read_to_default)
}

/// [`to_default`] as the dispositions are now.
fn read_to_default() -> Vec<c_int> {
    (1..=libc::SIGRTMAX())
        .filter(|&sig| {
            // SAFETY: sigaction with a null new action only reads the current one
            // into `old`, a zeroed plain C struct we own.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: see above.
            let read = unsafe { libc::sigaction(sig, ptr::null(), &mut old) } == 0;
            let caught = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            read && (caught || sig == libc::SIGPIPE)
        })
        .collect()
}

/// Reads what [`spawn`] needs once (the signals a child sets back to default), ahead
/// of the first command.
pub(crate) fn prepare() {
    to_default();
}

/// In the child only: sets `signals` back to their default action.
fn default_signal_handlers(signals: &[c_int]) {
    // SAFETY: sigaction on structures we own; the handlers are not called here.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        for &sig in signals {
            libc::sigaction(sig, &dfl, ptr::null_mut());
        }
    }
}

/// An anonymous mapping with a guard page at its low end.
struct Stack {
    base: *mut c_void,
    /// Usable bytes above the guard page.
    size: usize,
}

// SAFETY: the mapping is plain memory owned by whoever holds the `Stack`.
unsafe impl Send for Stack {}

/// A stack kept for the next spawn: unmapping one costs a TLB shootdown on every CPU
/// the agent's threads ran on, about as much as the rest of the spawn. At most
/// [`SPARE_MAX_BYTES`]: a stack made for a long argv is unmapped after its spawn.
static SPARE: Mutex<Option<Stack>> = Mutex::new(None);

/// The largest stack kept as the spare: twice the usual, so an argv of up to ~16 000
/// arguments still reuses it, and a huge one's stack is not held for ever.
const SPARE_MAX_BYTES: usize = 2 * STACK_BYTES;

impl Stack {
    /// The spare stack when it has at least `size` bytes and is free; else a new one
    /// (a spare too small stays the spare, for the next usual spawn).
    fn take(size: usize) -> io::Result<Self> {
        let fitting = SPARE.lock().ok().and_then(|mut spare| {
            spare
                .as_ref()
                .is_some_and(|stack| stack.size >= size)
                .then(|| spare.take())
                .flatten()
        });
        match fitting {
            Some(stack) => Ok(stack),
            None => Self::new(size.max(STACK_BYTES).next_multiple_of(PAGE)),
        }
    }

    /// Keeps this stack as the spare (a child that ran on it has exec'd or exited)
    /// unless it is larger than [`SPARE_MAX_BYTES`] or a spare is kept already. Every
    /// stack is a little larger than [`STACK_BYTES`] (room for the argv), so the test
    /// is a bound, not that size.
    fn put_back(self) {
        if self.size > SPARE_MAX_BYTES {
            return;
        }
        if let Ok(mut spare) = SPARE.lock() {
            if spare.is_none() {
                *spare = Some(self);
            }
        }
    }

    fn new(size: usize) -> io::Result<Self> {
        // SAFETY: a fresh private anonymous mapping, ours alone.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                size + PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, size };
        // SAFETY: the lowest page of our own mapping.
        if unsafe { libc::mprotect(base, PAGE, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The highest address (stacks grow down), 16-byte aligned.
    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of our mapping, which `clone` expects.
        unsafe { self.base.cast::<u8>().add(self.size + PAGE).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping, no longer used by any child.
        unsafe { libc::munmap(self.base, self.size + PAGE) };
    }
}

/// Every signal blocked for the calling thread until dropped (the old mask returns).
struct BlockedSignals {
    old: libc::sigset_t,
}

impl BlockedSignals {
    fn all() -> io::Result<Self> {
        // SAFETY: sigset_t values we own, filled by libc.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            match libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) {
                0 => Ok(Self { old }),
                e => Err(io::Error::from_raw_os_error(e)),
            }
        }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restoring the mask saved by `all`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;

    /// Runs `argv` with `env` in `cwd`, stdout into a pipe; returns (status, stdout),
    /// the status as `waitpid` gives it. The child is registered with the reaper, as the
    /// agent's are: the reaper's thread, started by another test of this process, would
    /// otherwise take its exit.
    fn run(argv: &[&str], env: &[(&str, &str)], cwd: &str) -> io::Result<(c_int, String)> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let program = Program::new(&argv, env.iter().map(|(k, v)| (k, v)), cwd)?;
        let null = std::fs::File::open("/dev/null")?;
        let (rx, tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let fds = [null.as_raw_fd(), tx.as_raw_fd(), null.as_raw_fd()];
        let ((), exit) = crate::reaper::spawn_with(|| Ok(((), spawn(&program, fds, &|| Ok(()))?)))?;
        drop(tx);
        let mut out = String::new();
        std::fs::File::from(rx).read_to_string(&mut out)?;
        let status = match exit.blocking_recv().expect("the reaper's answer") {
            crate::reaper::Exit::Code(code) => code << 8,
            crate::reaper::Exit::Signal(signal) => signal,
        };
        Ok((status, out))
    }

    #[test]
    fn child_gets_argv_environment_cwd_and_its_own_session() {
        let _serial = serial();
        let script = "echo \"$1|$FOO|$(pwd)\"; ps -o pid=,pgid=,sid= -p $$";
        let (status, out) = run(
            &["/bin/sh", "-c", script, "sh", "arg"],
            &[("FOO", "bar")],
            "/tmp",
        )
        .unwrap();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{out}"
        );
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("arg|bar|/tmp"));
        let ids: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
        assert_eq!(ids.len(), 3, "{out}");
        assert!(
            ids.iter().all(|id| *id == ids[0]),
            "pid, pgid, sid differ: {out}"
        );
    }

    #[test]
    fn signals_start_at_default_with_an_empty_mask() {
        let _serial = serial();
        // SigBlk: nothing blocked; SigIgn: SIGPIPE (ignored by Rust) back to default.
        let (_, out) = run(
            &["/bin/grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"],
            &[],
            "/",
        )
        .unwrap();
        let mask = |name: &str| {
            let line = out
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_default();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap_or_default(), 16)
        };
        assert_eq!(mask("SigBlk:"), Ok(0), "{out}");
        let ignored = mask("SigIgn:").unwrap();
        assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
    }

    /// Held by every test here: they share the process's spare stack, which plain
    /// `cargo test` (threads, not nextest's processes) would let them race for, and
    /// start children (see [`crate::children_test_lock`]).
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        crate::children_test_lock()
    }

    /// Writes `mark` at the bottom of the spare stack's usable bytes (a child, which
    /// starts at the top, never reaches them); false when no stack is kept.
    fn mark_spare(mark: u8) -> bool {
        let spare = SPARE.lock().unwrap();
        let Some(stack) = spare.as_ref() else {
            return false;
        };
        // SAFETY: the first usable byte above the guard page of a mapping the spare
        // owns, which no child uses while it is the spare (the lock is held).
        unsafe { stack.base.cast::<u8>().add(PAGE).write_volatile(mark) };
        true
    }

    /// The mark [`mark_spare`] left, read back from the spare stack (`None`: none kept).
    fn spare_mark() -> Option<u8> {
        let spare = SPARE.lock().unwrap();
        let stack = spare.as_ref()?;
        // SAFETY: as in `mark_spare`.
        Some(unsafe { stack.base.cast::<u8>().add(PAGE).read_volatile() })
    }

    #[test]
    fn a_usual_spawn_runs_on_the_kept_stack_and_a_huge_argv_does_not_take_it() {
        let _serial = serial();
        run(&["/bin/true"], &[], "/").unwrap();
        assert!(mark_spare(0xa5), "no stack kept after a spawn");
        run(&["/bin/true", "a", "b"], &[], "/").unwrap();
        // A stack made afresh reads zero there: the mark says it is the same mapping.
        assert_eq!(
            spare_mark(),
            Some(0xa5),
            "the next spawn did not run on the kept stack"
        );
        // An argv too long for the spare gets a stack of its own, unmapped after; the
        // spare stays for the next usual spawn.
        let mut huge = vec!["/bin/true"];
        huge.extend(std::iter::repeat_n("x", 40_000));
        run(&huge, &[], "/").unwrap();
        assert_eq!(
            spare_mark(),
            Some(0xa5),
            "a huge argv's spawn replaced the spare"
        );
        // One a little longer than the spare holds: its stack (under the bound) is kept
        // when no spare is.
        drop(SPARE.lock().unwrap().take());
        let mut long = vec!["/bin/true"];
        long.extend(std::iter::repeat_n("x", 10_000));
        run(&long, &[], "/").unwrap();
        assert!(
            mark_spare(0x5a),
            "a long argv's stack under the bound was not kept"
        );
        run(&["/bin/true"], &[], "/").unwrap();
        assert_eq!(spare_mark(), Some(0x5a));
    }

    #[test]
    fn a_failed_exec_is_an_error_and_leaves_no_child() {
        let _serial = serial();
        // Under the reaper's lock, as the agent spawns: a child the failed spawns left
        // would stay a zombie until the look below (another reaper may see it, not reap
        // it), which finds none.
        let null = std::fs::File::open("/dev/null").unwrap();
        let fds = [null.as_raw_fd(); 3];
        let (mut errors, mut left) = (Vec::new(), 0);
        let programs =
            [(["/no/such/program"], "/"), (["/bin/true"], "/no/such/dir")].map(|(argv, cwd)| {
                Program::new(&argv.map(String::from), std::iter::empty(), cwd).unwrap()
            });
        // Nothing in here panics: a panic would poison the reaper's lock for the others.
        let looked = crate::reaper::spawn_with::<()>(|| {
            for program in &programs {
                errors.push(
                    spawn(program, fds, &|| Ok(()))
                        .err()
                        .and_then(|e| e.raw_os_error()),
                );
            }
            // SAFETY: a look (WNOWAIT: nothing reaped) for any exited child of this
            // process, into a zeroed siginfo_t we own.
            left = unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
                libc::waitid(libc::P_ALL, 0, &mut info, flags);
                info.si_pid()
            };
            Err(io::Error::other("no child to register"))
        });
        assert_eq!(looked.unwrap_err().to_string(), "no child to register");
        assert_eq!(errors, [Some(libc::ENOENT); 2]);
        assert_eq!(left, 0, "child {left} was left unreaped");
    }

    #[test]
    fn a_file_without_shebang_runs_under_sh_and_setup_errors_stop_the_exec() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script");
        std::fs::write(&path, "echo from-script\n").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let (_, out) = run(&[path.to_str().unwrap()], &[], "/").unwrap();
        assert_eq!(out, "from-script\n");
        // So many arguments that execvpe's copy of argv outgrows the usual stack.
        std::fs::write(&path, "echo $#\n").unwrap();
        let mut many = vec![path.to_str().unwrap()];
        many.extend(std::iter::repeat_n("x", 40_000));
        let (status, out) = run(&many, &[], "/").unwrap();
        assert_eq!((status, out.as_str()), (0, "40000\n"));

        let argv = ["/bin/true".to_string()];
        let program = Program::new(&argv, std::iter::empty(), "/").unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let fd = null.as_raw_fd();
        let refuse = || Err(io::Error::from_raw_os_error(libc::EPERM));
        let err = spawn(&program, [fd, fd, fd], &refuse).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    }
}
