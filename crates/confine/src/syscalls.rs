//! The syscall allowlist, modelled on the default profiles of Docker (moby) and crun:
//! what a shell, coreutils, python, node, gcc and bash need, and nothing that mounts,
//! loads code into the kernel, traces other processes or touches host-wide state.

/// Syscalls allowed unconditionally on every supported architecture.
#[rustfmt::skip]
pub(crate) const COMMON: &[libc::c_long] = &[
    libc::SYS_accept, libc::SYS_accept4, libc::SYS_bind, libc::SYS_brk, libc::SYS_capget,
    libc::SYS_capset, libc::SYS_chdir, libc::SYS_clock_getres, libc::SYS_clock_gettime,
    libc::SYS_clock_nanosleep, libc::SYS_close, libc::SYS_close_range, libc::SYS_connect,
    libc::SYS_copy_file_range, libc::SYS_dup, libc::SYS_dup3, libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl, libc::SYS_epoll_pwait, libc::SYS_epoll_pwait2, libc::SYS_eventfd2,
    libc::SYS_execve, libc::SYS_execveat, libc::SYS_exit, libc::SYS_exit_group,
    libc::SYS_faccessat, libc::SYS_faccessat2, libc::SYS_fadvise64, libc::SYS_fallocate,
    libc::SYS_fchdir, libc::SYS_fchmod, libc::SYS_fchmodat, libc::SYS_fchown,
    libc::SYS_fchownat, libc::SYS_fcntl, libc::SYS_fdatasync, libc::SYS_fgetxattr,
    libc::SYS_flistxattr, libc::SYS_flock, libc::SYS_fremovexattr, libc::SYS_fsetxattr,
    libc::SYS_fstat, libc::SYS_fstatfs, libc::SYS_fsync, libc::SYS_ftruncate, libc::SYS_futex,
    libc::SYS_getcpu, libc::SYS_getcwd, libc::SYS_getdents64, libc::SYS_getegid,
    libc::SYS_geteuid, libc::SYS_getgid, libc::SYS_getgroups, libc::SYS_getitimer,
    libc::SYS_getpeername, libc::SYS_getpgid, libc::SYS_getpid, libc::SYS_getppid,
    libc::SYS_getpriority, libc::SYS_getrandom, libc::SYS_getresgid, libc::SYS_getresuid,
    libc::SYS_get_robust_list, libc::SYS_getrusage, libc::SYS_getsid,
    libc::SYS_getsockname, libc::SYS_getsockopt, libc::SYS_gettid, libc::SYS_gettimeofday,
    libc::SYS_getuid, libc::SYS_getxattr, libc::SYS_inotify_add_watch, libc::SYS_inotify_init1,
    libc::SYS_inotify_rm_watch, libc::SYS_io_cancel, libc::SYS_io_destroy,
    libc::SYS_io_getevents, libc::SYS_io_setup, libc::SYS_io_submit, libc::SYS_ioctl,
    libc::SYS_ioprio_get, libc::SYS_ioprio_set, libc::SYS_kill, libc::SYS_landlock_add_rule,
    libc::SYS_landlock_create_ruleset, libc::SYS_landlock_restrict_self, libc::SYS_lgetxattr,
    libc::SYS_linkat, libc::SYS_listen, libc::SYS_listxattr, libc::SYS_llistxattr,
    libc::SYS_lremovexattr, libc::SYS_lseek, libc::SYS_lsetxattr, libc::SYS_madvise,
    libc::SYS_membarrier, libc::SYS_memfd_create, libc::SYS_mincore, libc::SYS_mkdirat,
    libc::SYS_mknodat, libc::SYS_mlock, libc::SYS_mlock2, libc::SYS_mlockall, libc::SYS_mmap,
    libc::SYS_mprotect, libc::SYS_mq_getsetattr, libc::SYS_mq_notify, libc::SYS_mq_open,
    libc::SYS_mq_timedreceive, libc::SYS_mq_timedsend, libc::SYS_mq_unlink, libc::SYS_mremap,
    libc::SYS_msgctl, libc::SYS_msgget, libc::SYS_msgrcv, libc::SYS_msgsnd, libc::SYS_msync,
    libc::SYS_munlock, libc::SYS_munlockall, libc::SYS_munmap, libc::SYS_nanosleep,
    libc::SYS_newfstatat, libc::SYS_openat, libc::SYS_openat2, libc::SYS_pidfd_open,
    libc::SYS_pidfd_send_signal, libc::SYS_pipe2, libc::SYS_ppoll, libc::SYS_prctl,
    libc::SYS_pread64, libc::SYS_preadv, libc::SYS_preadv2, libc::SYS_prlimit64,
    libc::SYS_pselect6, libc::SYS_pwrite64, libc::SYS_pwritev, libc::SYS_pwritev2,
    libc::SYS_read, libc::SYS_readahead, libc::SYS_readlinkat, libc::SYS_readv,
    libc::SYS_recvfrom, libc::SYS_recvmmsg, libc::SYS_recvmsg, libc::SYS_remap_file_pages,
    libc::SYS_removexattr, libc::SYS_renameat2, libc::SYS_restart_syscall,
    libc::SYS_rseq, libc::SYS_rt_sigaction, libc::SYS_rt_sigpending, libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigqueueinfo, libc::SYS_rt_sigreturn, libc::SYS_rt_sigsuspend,
    libc::SYS_rt_sigtimedwait, libc::SYS_rt_tgsigqueueinfo, libc::SYS_sched_getaffinity,
    libc::SYS_sched_getattr, libc::SYS_sched_getparam, libc::SYS_sched_get_priority_max,
    libc::SYS_sched_get_priority_min, libc::SYS_sched_getscheduler,
    libc::SYS_sched_rr_get_interval, libc::SYS_sched_setaffinity, libc::SYS_sched_setattr,
    libc::SYS_sched_setparam, libc::SYS_sched_setscheduler, libc::SYS_sched_yield,
    libc::SYS_seccomp, libc::SYS_semctl, libc::SYS_semget, libc::SYS_semop,
    libc::SYS_semtimedop, libc::SYS_sendfile, libc::SYS_sendmmsg, libc::SYS_sendmsg,
    libc::SYS_sendto, libc::SYS_setfsgid, libc::SYS_setfsuid, libc::SYS_setgid,
    libc::SYS_setgroups, libc::SYS_setitimer, libc::SYS_setpgid, libc::SYS_setpriority,
    libc::SYS_setregid, libc::SYS_setresgid, libc::SYS_setresuid, libc::SYS_setreuid,
    libc::SYS_set_robust_list, libc::SYS_setsid, libc::SYS_setsockopt,
    libc::SYS_set_tid_address, libc::SYS_setuid, libc::SYS_setxattr, libc::SYS_shmat,
    libc::SYS_shmctl, libc::SYS_shmdt, libc::SYS_shmget, libc::SYS_shutdown,
    libc::SYS_sigaltstack, libc::SYS_signalfd4, libc::SYS_socket, libc::SYS_socketpair,
    libc::SYS_splice, libc::SYS_statfs, libc::SYS_statx, libc::SYS_symlinkat, libc::SYS_sync,
    libc::SYS_syncfs, libc::SYS_sysinfo, libc::SYS_tee,
    libc::SYS_tgkill, libc::SYS_timer_create, libc::SYS_timer_delete,
    libc::SYS_timer_getoverrun, libc::SYS_timer_gettime, libc::SYS_timer_settime,
    libc::SYS_timerfd_create, libc::SYS_timerfd_gettime, libc::SYS_timerfd_settime,
    libc::SYS_times, libc::SYS_tkill, libc::SYS_truncate, libc::SYS_umask, libc::SYS_uname,
    libc::SYS_unlinkat, libc::SYS_utimensat, libc::SYS_vmsplice, libc::SYS_wait4,
    libc::SYS_waitid, libc::SYS_write, libc::SYS_writev,
];

/// Legacy syscalls that only x86_64 has (aarch64 libcs use the `*at` forms).
#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
pub(crate) const ARCH_SPECIFIC: &[libc::c_long] = &[
    libc::SYS_access, libc::SYS_alarm, libc::SYS_arch_prctl, libc::SYS_chmod, libc::SYS_chown,
    libc::SYS_creat, libc::SYS_dup2, libc::SYS_epoll_create, libc::SYS_epoll_wait,
    libc::SYS_eventfd, libc::SYS_fork, libc::SYS_futimesat, libc::SYS_getdents,
    libc::SYS_getpgrp, libc::SYS_inotify_init, libc::SYS_lchown, libc::SYS_link,
    libc::SYS_lstat, libc::SYS_mkdir, libc::SYS_mknod, libc::SYS_open, libc::SYS_pause,
    libc::SYS_pipe, libc::SYS_poll, libc::SYS_readlink, libc::SYS_rename, libc::SYS_rmdir,
    libc::SYS_select, libc::SYS_set_thread_area, libc::SYS_signalfd, libc::SYS_stat,
    libc::SYS_symlink, libc::SYS_time, libc::SYS_unlink, libc::SYS_utime, libc::SYS_utimes,
    libc::SYS_vfork, libc::SYS_getrlimit, libc::SYS_setrlimit, libc::SYS_renameat,
    libc::SYS_sync_file_range,
];

/// Generic-table syscalls the `libc` crate names on x86_64 only: getrlimit (163),
/// setrlimit (164), renameat (38), sync_file_range (84) in arm64's unistd.h.
#[cfg(target_arch = "aarch64")]
pub(crate) const ARCH_SPECIFIC: &[libc::c_long] = &[163, 164, 38, 84];

/// `personality(2)` values allowed (as Docker does): Linux, UNAME26, ADDR_NO_RANDOMIZE
/// combinations, and the query value.
pub(crate) const PERSONALITIES: &[u64] = &[0x0, 0x0008, 0x20000, 0x20008, 0xffff_ffff];

/// Socket families a command may create (`socket`, `socketpair`): local, IPv4, IPv6 and
/// netlink. The rest (vsock toward a hypervisor, XDP, packet, ALG, Bluetooth, ...) is
/// kernel code a sandbox has no use for, refused with `EAFNOSUPPORT`.
pub(crate) const SOCKET_FAMILIES: &[u64] = &[
    libc::AF_UNIX as u64,
    libc::AF_INET as u64,
    libc::AF_INET6 as u64,
    libc::AF_NETLINK as u64,
];

/// Netlink protocols allowed: routing (`ip`, getaddrinfo), socket diagnostics (`ss`)
/// and generic netlink. Netfilter, xfrm, audit, uevents and the rest are refused with
/// `EPROTONOSUPPORT`.
pub(crate) const NETLINK_PROTOCOLS: &[u64] = &[
    libc::NETLINK_ROUTE as u64,
    libc::NETLINK_SOCK_DIAG as u64,
    libc::NETLINK_GENERIC as u64,
];

/// Syscalls that must never be allowed; the unit tests check the allowlist against it.
#[cfg(test)]
#[rustfmt::skip]
pub(crate) const DENIED: &[libc::c_long] = &[
    libc::SYS_mount, libc::SYS_umount2, libc::SYS_pivot_root, libc::SYS_move_mount,
    libc::SYS_open_tree, libc::SYS_fsopen, libc::SYS_fsmount, libc::SYS_fspick,
    libc::SYS_mount_setattr, libc::SYS_kexec_load, libc::SYS_kexec_file_load, libc::SYS_bpf,
    libc::SYS_ptrace, libc::SYS_process_vm_readv, libc::SYS_process_vm_writev, libc::SYS_keyctl,
    libc::SYS_add_key, libc::SYS_request_key, libc::SYS_init_module, libc::SYS_finit_module,
    libc::SYS_delete_module, libc::SYS_setns, libc::SYS_swapon, libc::SYS_swapoff,
    libc::SYS_reboot, libc::SYS_syslog, libc::SYS_acct, libc::SYS_settimeofday,
    libc::SYS_clock_settime, libc::SYS_clock_adjtime, libc::SYS_adjtimex,
    libc::SYS_open_by_handle_at, libc::SYS_perf_event_open, libc::SYS_userfaultfd,
    libc::SYS_quotactl, libc::SYS_lookup_dcookie,
];
