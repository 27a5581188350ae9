//! Seeing, signalling and tracing processes outside the probe's reach.

use crate::report::Attempt;
use crate::targets::Targets;

pub fn attempts(t: &Targets) -> Vec<Attempt> {
    let mut out = vec![visible_pids()];
    if let Some(pid) = t.host_pid {
        out.push(Attempt::from_io(
            format!("read /proc/{pid}/cmdline of the host process"),
            std::fs::read(format!("/proc/{pid}/cmdline")),
        ));
        // SAFETY: signal 0 only checks existence and permission.
        let ret = unsafe { libc::kill(pid, 0) };
        out.push(Attempt::from_ret(
            format!("kill({pid}, 0) the host process"),
            ret.into(),
        ));
        out.push(ptrace_attach(pid, "the host process"));
    }
    out.push(ptrace_attach(1, "PID 1 (the agent)"));
    out.push(read_agent_memory());
    out
}

/// The PID namespace shows only the sandbox's own few processes.
fn visible_pids() -> Attempt {
    let pids: Vec<String> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
                .collect()
        })
        .unwrap_or_default();
    let comm1 = std::fs::read_to_string("/proc/1/comm").unwrap_or_default();
    let result = format!("{} pids visible, PID 1 is {:?}", pids.len(), comm1.trim());
    // A host PID namespace would show the host's init and kernel threads (kthreadd is 2).
    let kthreadd = std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd");
    if pids.len() > 16 || kthreadd {
        Attempt::escaped("list host processes in /proc", result)
    } else {
        Attempt::refused("list host processes in /proc", result)
    }
}

fn ptrace_attach(pid: i32, what: &str) -> Attempt {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: PTRACE_ATTACH takes no pointers; on success we detach at once.
    let ret = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, null, null) };
    if ret == 0 {
        // SAFETY: as above.
        unsafe {
            libc::waitpid(pid, std::ptr::null_mut(), libc::__WALL);
            libc::ptrace(libc::PTRACE_DETACH, pid, null, null);
        }
    }
    Attempt::from_ret(format!("ptrace(PTRACE_ATTACH) {what}"), ret)
}

/// process_vm_readv of the agent's stack page: reading another process's memory.
fn read_agent_memory() -> Attempt {
    let mut buf = [0u8; 8];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Any address will do: permission is checked before the address.
    let remote = libc::iovec {
        iov_base: 0x1000 as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: the local iovec points at our own buffer.
    let ret = unsafe { libc::process_vm_readv(1, &local, 1, &remote, 1, 0) };
    Attempt::from_ret("process_vm_readv of PID 1 (the agent)", ret as i64)
}
