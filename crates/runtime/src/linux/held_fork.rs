//! A held init forked from the process that holds it, without an exec: the child of a
//! one-shot run at its very start (one thread, nothing opened yet but its arguments)
//! goes on as the sandbox's init in the run's copy-on-write image, instead of loading
//! the 200 MB binary anew (its exec, relocations and runtime start took 2-3 ms of the
//! run's critical path). What an exec would have given it is made here by hand: no
//! descriptor but the handshake and stdio, a clean environment (its old strings
//! zeroed), the signal dispositions of a fresh start, no fault injection points, and the
//! command line an exec'd init shows (`ps`, the tests' process checks).

use std::ffi::CStr;
use std::os::fd::RawFd;
use std::process::ExitCode;

/// What the child needs, made in the parent before its fork.
pub(super) struct Becoming {
    /// The environment's strings as the run has them (address, length): zeroed in the
    /// child, whose copy-on-write memory holds them at the same addresses.
    env: Vec<(usize, usize)>,
    /// The command line an exec'd held init would show, NUL-separated.
    line: Vec<u8>,
}

impl Becoming {
    /// For an init that an exec would have started as `argv`.
    pub(super) fn new(argv: &[&std::ffi::OsStr]) -> Becoming {
        use std::os::unix::ffi::OsStrExt;
        let mut env = Vec::new();
        // SAFETY: `environ` is the C library's NULL-terminated array of NUL-terminated
        // strings; the process has one thread (held inits are made before any other
        // starts), so nothing changes it while it is read.
        unsafe {
            let mut at = environ;
            while !at.is_null() && !(*at).is_null() {
                env.push((*at as usize, CStr::from_ptr(*at).to_bytes().len()));
                at = at.add(1);
            }
        }
        let mut line = Vec::new();
        for arg in argv {
            line.extend_from_slice(arg.as_bytes());
            line.push(0);
        }
        Becoming { env, line }
    }

    /// In the forked child, with the handshake on `sync_fd` and stdio set: becomes the
    /// init and runs `entry`, then exits with its code. Never returns.
    ///
    /// # Safety
    /// Only in the child of a fork of a process that had a single thread.
    pub(super) unsafe fn become_init(&self, sync_fd: RawFd, entry: fn(RawFd) -> ExitCode) -> ! {
        // First the descriptors: the run's own (the caller's pipes, its hand-off) must
        // not stay open in the sandbox's init, and the spawner learns the "exec" went
        // through when its error pipe closes here.
        // SAFETY: close_range(2) on descriptors this child does not use.
        unsafe { libc::syscall(libc::SYS_close_range, sync_fd + 1, RawFd::MAX, 0) };
        if sync_fd > 3 {
            // SAFETY: as above.
            unsafe { libc::syscall(libc::SYS_close_range, 3, sync_fd - 1, 0) };
        }
        // SAFETY: single-threaded child (the caller's contract).
        unsafe { fresh_signals() };
        for &(at, len) in &self.env {
            // SAFETY: the child's copy of the strings `new` measured in the parent.
            unsafe { std::ptr::write_bytes(at as *mut u8, 0, len) };
        }
        // SAFETY: as above.
        unsafe { self.show_as_exec() };
        crate::faults::clear();
        let code = std::panic::catch_unwind(|| entry(sync_fd)).unwrap_or(ExitCode::FAILURE);
        // An init's `main` ends with success or failure only (its agent never returns);
        // `exit` flushes and ends as a return from `main` does.
        std::process::exit(match code == ExitCode::SUCCESS {
            true => 0,
            false => 1,
        })
    }

    /// Points the process's `/proc/PID/cmdline` at the exec'd init's line and its
    /// `/proc/PID/environ` at its environment (`PATH` alone), through `PR_SET_MM_MAP`
    /// (which, unlike the single-field `PR_SET_MM` calls, needs no CAP_SYS_RESOURCE);
    /// left as they were (the run's line, the environment's zeroed strings) when the
    /// kernel refuses.
    unsafe fn show_as_exec(&self) {
        let Some(mut map) = MmMap::current() else {
            return;
        };
        let mut shown = self.line.clone();
        let env_at = shown.len();
        shown.extend_from_slice(PATH_ENV);
        shown.push(0);
        let len = shown.len();
        // SAFETY: a fresh anonymous mapping, written before it is shown, never unmapped
        // (the init's whole life); prctl reads `map`, a complete `prctl_mm_map`.
        unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if at == libc::MAP_FAILED {
                return;
            }
            std::ptr::copy_nonoverlapping(shown.as_ptr(), at.cast::<u8>(), len);
            let base = at as u64;
            (map.arg_start, map.arg_end) = (base, base + env_at as u64);
            (map.env_start, map.env_end) = (base + env_at as u64, base + len as u64);
            libc::prctl(
                libc::PR_SET_MM,
                libc::PR_SET_MM_MAP,
                &map as *const MmMap as libc::c_ulong,
                std::mem::size_of::<MmMap>() as libc::c_ulong,
                0,
            );
        }
    }
}

/// The environment an exec'd init gets (`init_process::init_command`'s).
const PATH_ENV: &[u8] = b"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `struct prctl_mm_map` (linux/prctl.h).
#[repr(C)]
struct MmMap {
    start_code: u64,
    end_code: u64,
    start_data: u64,
    end_data: u64,
    start_brk: u64,
    brk: u64,
    start_stack: u64,
    arg_start: u64,
    arg_end: u64,
    env_start: u64,
    env_end: u64,
    auxv: u64,
    auxv_size: u32,
    exe_fd: u32,
}

impl MmMap {
    /// The process's map as `/proc/self/stat` tells it (fields 26-28 and 45-51, see
    /// proc(5)), the auxiliary vector and the exe link unchanged.
    fn current() -> Option<MmMap> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields from the third on, after the parenthesised command.
        let (_, rest) = stat.rsplit_once(") ")?;
        let fields: Vec<u64> = rest
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        let field = |n: usize| fields.get(n - 3).copied();
        // SAFETY: sbrk(0) only reads the current program break.
        let brk = unsafe { libc::sbrk(0) } as u64;
        Some(MmMap {
            start_code: field(26)?,
            end_code: field(27)?,
            start_stack: field(28)?,
            start_data: field(45)?,
            end_data: field(46)?,
            start_brk: field(47)?,
            brk,
            arg_start: field(48)?,
            arg_end: field(49)?,
            env_start: field(50)?,
            env_end: field(51)?,
            auxv: 0,
            auxv_size: 0,
            exe_fd: u32::MAX,
        })
    }
}

/// The dispositions an exec'd sandboxd starts with: every caught signal back to its
/// default (the run's early handlers), SIGPIPE ignored (as Rust's runtime sets it at
/// start; the spawn just reset it), SIGSEGV and SIGBUS kept (the runtime's stack
/// overflow report), nothing blocked.
unsafe fn fresh_signals() {
    // SAFETY: sigaction(2) and sigprocmask(2) on this single-threaded child's own state.
    unsafe {
        for signo in 1..=libc::SIGRTMAX() {
            if matches!(
                signo,
                libc::SIGKILL | libc::SIGSTOP | libc::SIGSEGV | libc::SIGBUS | libc::SIGPIPE
            ) {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signo, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
                libc::signal(signo, libc::SIG_DFL);
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

extern "C" {
    /// The C library's environment (see environ(7)).
    static mut environ: *const *const libc::c_char;
}
