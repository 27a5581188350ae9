//! A held init forked from the process that holds it, without an exec: a one-shot
//! run's child at its very start (one thread; what it read by then is its command line,
//! its environment and its status pipe) goes on as the sandbox's init in the run's
//! copy-on-write image instead of loading the 222 MB binary anew (the exec, its
//! relocations and its runtime's start: 1.4-2 ms of a run's wall time in an A/B). What an
//! exec would have given it is made here by hand: its session, no descriptor but the
//! handshake's and /dev/null for stdio, the signal dispositions of a fresh start, the
//! exec'd init's environment (`PATH` alone) and command line, shown in /proc too, the
//! run's original argument and environment strings zeroed, and no fault injection
//! points. What it cannot give: it shares the run's address layout and the random
//! seeds its C library and runtime drew at the run's start, keeps the libraries the run
//! loaded (an `LD_PRELOAD`, `GLIBC_TUNABLES` as read at its start), and its heap still
//! holds the run's parsed arguments (`clap`'s copies: the command, `-e` values, paths
//! the sandbox gets or that name host dirs) and the values the run read from its
//! environment (`SANDBOXD_DATA_DIR`, `SANDBOXD_FAILPOINTS`). The sandbox's PID 1 is not
//! dumpable, so its processes cannot read that memory.

use std::ffi::OsStr;
use std::os::fd::RawFd;
use std::process::ExitCode;

/// The environment an exec'd init gets (`init_process::init_command`'s).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the child shows in /proc, made in the parent before its fork.
pub(super) struct Becoming {
    /// The exec'd init's command line, NUL-separated, then its environment.
    shown: Vec<u8>,
    /// Where the environment starts in `shown`.
    env_at: usize,
}

impl Becoming {
    /// For an init that an exec would have started as `argv`; `None` when this process
    /// cannot fork one: it has more than one thread (a fork's child may then not run
    /// any code), or the kernel cannot show the init's command line in place of the
    /// run's (no `PR_SET_MM_MAP`, a kernel without checkpoint/restore).
    pub(super) fn new(argv: &[&OsStr]) -> Option<Becoming> {
        use std::os::unix::ffi::OsStrExt;
        if threads()? != 1 {
            return None;
        }
        let mut size: libc::c_uint = 0;
        // SAFETY: PR_SET_MM_MAP_SIZE only writes the map's size into `size`.
        let probed = unsafe {
            libc::prctl(
                libc::PR_SET_MM,
                libc::PR_SET_MM_MAP_SIZE,
                &mut size as *mut libc::c_uint as libc::c_ulong,
                0,
                0,
            )
        };
        if probed != 0 || size as usize != std::mem::size_of::<MmMap>() {
            return None;
        }
        let mut shown = Vec::new();
        for arg in argv {
            shown.extend_from_slice(arg.as_bytes());
            shown.push(0);
        }
        let env_at = shown.len();
        shown.extend_from_slice(b"PATH=");
        shown.extend_from_slice(PATH.as_bytes());
        shown.push(0);
        Some(Becoming { shown, env_at })
    }

    /// In the forked child, with the handshake on `theirs`: becomes the init (the
    /// handshake on `sync_fd`) and runs `entry(sync_fd)`, then exits with its code.
    /// Never returns into the parent's frames: a panic anywhere ends the child (with
    /// status 1 before `entry`; the handshake closes and the start makes its init
    /// another way: a spawned one, or a cold start).
    ///
    /// # Safety
    /// Only in the child of a fork of a single-threaded process (as [`Becoming::new`]
    /// found it): it runs any code.
    pub(super) unsafe fn become_init(
        &self,
        theirs: RawFd,
        sync_fd: RawFd,
        entry: fn(RawFd) -> ExitCode,
    ) -> ! {
        let became = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: the caller's contract (a single-threaded fork's child).
            unsafe { self.take_on(theirs, sync_fd) }
        }));
        if !matches!(became, Ok(true)) {
            // The run's descriptors or strings could stay in the sandbox's init: it
            // ends, its handshake closes and the start makes its init another way.
            // SAFETY: plain exit of this child; no destructor of the parent's runs.
            unsafe { libc::_exit(1) };
        }
        let code = std::panic::catch_unwind(|| entry(sync_fd)).unwrap_or(ExitCode::FAILURE);
        // An init's `main` ends with success or failure only (its agent never returns);
        // `exit` ends as a return from `main` does.
        std::process::exit(match code == ExitCode::SUCCESS {
            true => 0,
            false => 1,
        })
    }

    /// The steps of [`Becoming::become_init`] before its entry; whether they all went.
    ///
    /// # Safety
    /// As [`Becoming::become_init`].
    unsafe fn take_on(&self, theirs: RawFd, sync_fd: RawFd) -> bool {
        // SAFETY: setsid(2) in a child that is no group leader.
        unsafe { libc::setsid() };
        if keep_only_handshake(theirs, sync_fd).is_err() {
            return false;
        }
        // SAFETY: this child's own dispositions; it has one thread.
        unsafe { fresh_signals() };
        let Some(old) = MmMap::current() else {
            return false;
        };
        // The exec'd init's environment, for what reads it in the init: cleared without
        // a copy of any value (a freed copy would keep most of its bytes on the heap).
        // SAFETY: clearenv(3) in a single-threaded process; nothing holds an entry.
        if unsafe { libc::clearenv() } != 0 {
            return false;
        }
        std::env::set_var("PATH", PATH);
        // SAFETY: the run's argument and environment strings. Nothing reads them from
        // here on: the environment is new, and what still points at the arguments (the
        // runtime's `args`, the C library's program name) reads them as empty.
        unsafe {
            zero(old.arg_start, old.arg_end);
            zero(old.env_start, old.env_end);
        }
        // Refused (though probed): the init would show an empty line; it ends instead.
        if self.show(old).is_err() {
            return false;
        }
        let failed = crate::faults::hit("held.fork_child");
        crate::faults::clear();
        !failed
    }

    /// Points `/proc/PID/cmdline` and `/proc/PID/environ` at [`Becoming::shown`] (as
    /// CRIU restores them: `PR_SET_MM_MAP` needs no CAP_SYS_RESOURCE).
    fn show(&self, mut map: MmMap) -> std::io::Result<()> {
        let len = self.shown.len();
        // SAFETY: a fresh anonymous mapping, written before it is shown, never unmapped
        // (the init's whole life); prctl reads `map`, a whole `prctl_mm_map`.
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
                return Err(std::io::Error::last_os_error());
            }
            std::ptr::copy_nonoverlapping(self.shown.as_ptr(), at.cast::<u8>(), len);
            let base = at as u64;
            // The heap's end as it is now (the steps before allocated): the map sets it.
            map.brk = libc::sbrk(0) as u64;
            (map.arg_start, map.arg_end) = (base, base + self.env_at as u64);
            (map.env_start, map.env_end) = (base + self.env_at as u64, base + len as u64);
            let set = libc::prctl(
                libc::PR_SET_MM,
                libc::PR_SET_MM_MAP,
                &map as *const MmMap as libc::c_ulong,
                std::mem::size_of::<MmMap>() as libc::c_ulong,
                0,
            );
            match set {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        }
    }
}

/// The number of threads of this process (field 20 of `/proc/self/stat`).
fn threads() -> Option<u64> {
    stat_fields()?.get(20 - 3).copied()
}

/// The fields of `/proc/self/stat` from the third on (after the parenthesised command),
/// as numbers (0 for the state letter).
fn stat_fields() -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// Moves `theirs` to `sync_fd`, /dev/null to stdin, stdout and stderr, and closes
/// every other descriptor (the run's: the caller's pipes, its status pipe, its end of
/// the handshake).
fn keep_only_handshake(theirs: RawFd, sync_fd: RawFd) -> std::io::Result<()> {
    let check = |rc: libc::c_int| match rc {
        -1 => Err(std::io::Error::last_os_error()),
        _ => Ok(()),
    };
    // SAFETY: descriptor calls on this child's own table; nothing else holds them.
    unsafe {
        match theirs == sync_fd {
            true => check(libc::fcntl(sync_fd, libc::F_SETFD, 0))?,
            false => check(libc::dup2(theirs, sync_fd))?,
        }
        // Not close-on-exec: it may land on 0-2 itself (the run started with one
        // closed), and stays open only there (`close_from` takes it above).
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        check(null)?;
        for fd in 0..3 {
            check(libc::dup2(null, fd))?;
        }
    }
    close_from(sync_fd + 1)
}

/// Closes every descriptor from `first` on: close_range(2), or one by one as
/// /proc/self/fd lists them where that call is missing (before Linux 5.9) or refused.
fn close_from(first: RawFd) -> std::io::Result<()> {
    // SAFETY: close_range(2) on descriptors this child does not use.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0) };
    if rc == 0 {
        return Ok(());
    }
    let open: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd >= first)
        .collect();
    for fd in open {
        // SAFETY: as above (the listing's own descriptor is closed already: EBADF).
        unsafe { libc::close(fd) };
    }
    Ok(())
}

/// Zeroes the bytes from `start` to `end` of this process's memory.
///
/// # Safety
/// The range must be this process's writable memory that nothing reads any more.
unsafe fn zero(start: u64, end: u64) {
    if end > start {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::write_bytes(start as *mut u8, 0, (end - start) as usize) };
    }
}

/// The dispositions an exec'd sandboxd starts with: every caught signal back to its
/// default (the run's early handlers), SIGPIPE ignored (as Rust's runtime sets it at
/// start), SIGSEGV and SIGBUS kept (the runtime's stack overflow report), nothing
/// blocked.
///
/// # Safety
/// Only in a single-threaded process (no other thread relies on its handlers).
unsafe fn fresh_signals() {
    // SAFETY: sigaction(2) and sigprocmask(2) on this process's own state.
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
    /// proc(5)), with the auxiliary vector and the exe link left as they are.
    fn current() -> Option<MmMap> {
        let fields = stat_fields()?;
        let field = |n: usize| fields.get(n - 3).copied();
        Some(MmMap {
            start_code: field(26)?,
            end_code: field(27)?,
            start_stack: field(28)?,
            start_data: field(45)?,
            end_data: field(46)?,
            start_brk: field(47)?,
            // Read again right before the map is set (see `Becoming::show`).
            brk: 0,
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
