//! Kernel-wide operations: modules, kexec, bpf, devices, hostname and clock.

use super::cstr;
use crate::report::Attempt;
use std::fs::OpenOptions;

pub fn attempts() -> Vec<Attempt> {
    let mut out = modules_and_kexec();
    out.push(bpf_map_create());
    out.extend(devices());
    out.extend(names_and_time());
    out.push(open_by_handle());
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: asks for I/O port access; refused without CAP_SYS_RAWIO.
        let ret = unsafe { libc::ioperm(0x80, 1, 1) };
        out.push(Attempt::from_ret("ioperm(0x80) raw I/O ports", ret.into()));
        // SAFETY: as above.
        let ret = unsafe { libc::syscall(libc::SYS_iopl, 3) };
        out.push(Attempt::from_ret("iopl(3)", ret));
    }
    out
}

fn modules_and_kexec() -> Vec<Attempt> {
    let empty = cstr("");
    let devnull = std::fs::File::open("/dev/null");
    let fd = devnull
        .as_ref()
        .map(std::os::fd::AsRawFd::as_raw_fd)
        .unwrap_or(-1);
    let null = std::ptr::null::<u8>();
    // SAFETY: each call passes null/empty buffers or /dev/null; permission comes first.
    unsafe {
        vec![
            Attempt::from_ret(
                "init_module",
                libc::syscall(libc::SYS_init_module, null, 0usize, empty.as_ptr()),
            ),
            Attempt::from_ret(
                "finit_module(/dev/null)",
                libc::syscall(libc::SYS_finit_module, fd, empty.as_ptr(), 0),
            ),
            Attempt::from_ret(
                "delete_module(\"loop\")",
                libc::syscall(
                    libc::SYS_delete_module,
                    cstr("loop").as_ptr(),
                    libc::O_NONBLOCK,
                ),
            ),
            Attempt::from_ret(
                "kexec_load",
                libc::syscall(libc::SYS_kexec_load, 0usize, 0usize, null, 0usize),
            ),
            Attempt::from_ret(
                "kexec_file_load(/dev/null)",
                libc::syscall(
                    libc::SYS_kexec_file_load,
                    fd,
                    fd,
                    1usize,
                    empty.as_ptr(),
                    0usize,
                ),
            ),
        ]
    }
}

/// BPF_MAP_CREATE of a one-entry array map: the least privileged bpf operation.
fn bpf_map_create() -> Attempt {
    let mut attr = [0u32; 30];
    attr[..4].copy_from_slice(&[2, 4, 4, 1]); // BPF_MAP_TYPE_ARRAY, key 4, value 4, 1 entry
    let size = std::mem::size_of_val(&attr);
    // SAFETY: attr is a valid buffer of `size` bytes; a returned fd is closed.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, 0, attr.as_ptr(), size) };
    if fd >= 0 {
        // SAFETY: our own fd.
        unsafe { libc::close(fd as i32) };
    }
    Attempt::from_ret("bpf(BPF_MAP_CREATE)", fd)
}

fn devices() -> Vec<Attempt> {
    let mut out: Vec<Attempt> = [
        "/dev/mem",
        "/dev/kmem",
        "/dev/port",
        "/dev/sda",
        "/dev/vda",
        "/dev/nvme0n1",
        "/dev/xvda",
        "/dev/raw/rawctl",
        "/dev/kmsg",
    ]
    .iter()
    .map(|p| Attempt::from_io(format!("open {p}"), OpenOptions::new().read(true).open(p)))
    .collect();
    for (what, path, kind, major, minor) in [
        (
            "mknod a block device 8:0 (sda)",
            "/tmp/escape-probe-sda",
            libc::S_IFBLK,
            8,
            0,
        ),
        (
            "mknod a char device 1:1 (mem)",
            "/tmp/escape-probe-mem",
            libc::S_IFCHR,
            1,
            1,
        ),
    ] {
        let p = cstr(path);
        // SAFETY: valid C string; a created node is removed at once.
        let ret = unsafe { libc::mknod(p.as_ptr(), kind | 0o600, libc::makedev(major, minor)) };
        if ret == 0 {
            let _ = std::fs::remove_file(path);
        }
        out.push(Attempt::from_ret(what, ret.into()));
    }
    out
}

fn names_and_time() -> Vec<Attempt> {
    let name = b"escaped";
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: reads the clock into our struct.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    let tv = libc::timeval {
        tv_sec: now.tv_sec,
        tv_usec: 0,
    };
    // SAFETY: valid buffers; setting the clock to "now" would be harmless even if allowed.
    unsafe {
        vec![
            Attempt::from_ret(
                "sethostname",
                libc::sethostname(name.as_ptr().cast(), name.len()).into(),
            ),
            Attempt::from_ret(
                "setdomainname",
                libc::setdomainname(name.as_ptr().cast(), name.len()).into(),
            ),
            Attempt::from_ret(
                "settimeofday",
                libc::settimeofday(&tv, std::ptr::null()).into(),
            ),
            Attempt::from_ret(
                "clock_settime(CLOCK_REALTIME)",
                libc::clock_settime(libc::CLOCK_REALTIME, &now).into(),
            ),
        ]
    }
}

/// open_by_handle_at: the "shocker" escape, opening host inodes by file handle.
fn open_by_handle() -> Attempt {
    // struct file_handle { u32 handle_bytes; i32 handle_type; u8 f_handle[8] } for inode 2.
    let mut handle = [0u8; 16];
    handle[..4].copy_from_slice(&8u32.to_ne_bytes());
    handle[4..8].copy_from_slice(&1i32.to_ne_bytes());
    handle[8..12].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: the handle buffer is valid for 16 bytes; a returned fd is closed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            libc::AT_FDCWD,
            handle.as_ptr(),
            libc::O_RDONLY,
        )
    };
    if fd >= 0 {
        // SAFETY: our own fd.
        unsafe { libc::close(fd as i32) };
    }
    Attempt::from_ret("open_by_handle_at (shocker)", fd)
}
