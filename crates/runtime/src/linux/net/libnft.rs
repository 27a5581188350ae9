//! nftables scripts run in-process through the host's `libnftables` (loaded at run time
//! with `dlopen`, so building needs no C library and a host without it falls back to
//! the `nft` binary): each script is one netlink transaction, without the ~30 ms of
//! spawning `nft` and its start-up. Only the rare script uses it (upgrading a table an
//! older sandboxd made); the table is made by `nftable`, and sandboxes' own entries
//! are set elements sent by `nfset`, both over netlink without it.
//!
//! One context is kept for the process, behind a mutex (a context is not thread-safe).
//!
//! Opt-in (`SANDBOXD_LIBNFTABLES=1`): libnftables is GPL-2.0 and sandboxd Apache-2.0;
//! whether loading it into our process makes a combined work is for the operator (and
//! the project's maintainers) to decide, so by default sandboxd spawns `nft`, a separate
//! program, as podman's netavark does.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

type CtxNew = unsafe extern "C" fn(u32) -> *mut c_void;
type CtxInt = unsafe extern "C" fn(*mut c_void) -> c_int;
type CtxStr = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type RunCmd = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;

/// The library's entry points and one context made with them.
struct Lib {
    ctx: *mut c_void,
    run: RunCmd,
    errors: CtxStr,
    output: CtxStr,
}

// SAFETY: the context is only used under the mutex that owns `Lib`, one thread at a
// time; libnftables keeps no thread-local state.
unsafe impl Send for Lib {}

/// Whether the operator opted in to loading libnftables (`SANDBOXD_LIBNFTABLES=1`).
pub fn opted_in() -> bool {
    std::env::var_os(OPT_IN).is_some_and(|v| v == "1")
}

/// The environment variable that opts in.
pub const OPT_IN: &str = "SANDBOXD_LIBNFTABLES";

/// The loaded library, or `None` when not opted in or the host has none (then callers
/// spawn `nft`).
fn lib() -> Option<&'static Mutex<Lib>> {
    static LIB: OnceLock<Option<Mutex<Lib>>> = OnceLock::new();
    LIB.get_or_init(|| match opted_in().then(load) {
        None => None,
        Some(Ok(lib)) => Some(Mutex::new(lib)),
        Some(Err(e)) => {
            tracing::info!(error = %e, "libnftables unavailable; nftables through the nft binary");
            None
        }
    })
    .as_ref()
}

/// Looks `name` up in `handle` as a function of type `T` (a function pointer type).
///
/// # Safety
/// `T` must be the C signature of `name`.
unsafe fn symbol<T: Copy>(handle: *mut c_void, name: &CStr) -> Result<T, String> {
    // SAFETY: handle is a live dlopen handle; name is NUL-terminated.
    let ptr = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if ptr.is_null() {
        return Err(format!("libnftables has no {name:?}"));
    }
    // SAFETY: T is a function pointer type of the symbol's signature (caller's promise),
    // the same size as a data pointer on Linux.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&ptr) })
}

fn load() -> Result<Lib, String> {
    let file = c"libnftables.so.1";
    // SAFETY: dlopen with a NUL-terminated name; the handle is never closed (the
    // library stays for the process, as the context made from it does).
    let handle = unsafe { libc::dlopen(file.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err("libnftables.so.1 not found".into());
    }
    // SAFETY: each type is the function's C signature from <nftables/libnftables.h>.
    let (new, buffer_output, buffer_error, errors, output, run) = unsafe {
        (
            symbol::<CtxNew>(handle, c"nft_ctx_new")?,
            symbol::<CtxInt>(handle, c"nft_ctx_buffer_output")?,
            symbol::<CtxInt>(handle, c"nft_ctx_buffer_error")?,
            symbol::<CtxStr>(handle, c"nft_ctx_get_error_buffer")?,
            symbol::<CtxStr>(handle, c"nft_ctx_get_output_buffer")?,
            symbol::<RunCmd>(handle, c"nft_run_cmd_from_buffer")?,
        )
    };
    // SAFETY: NFT_CTX_DEFAULT (0); the context is checked and then owned by `Lib`.
    let ctx = unsafe { new(0) };
    if ctx.is_null() {
        return Err("nft_ctx_new failed".into());
    }
    // SAFETY: ctx is a live context; buffering keeps listings and errors off our stdio.
    unsafe {
        buffer_output(ctx);
        buffer_error(ctx);
    }
    Ok(Lib {
        ctx,
        run,
        errors,
        output,
    })
}

/// Runs `script` as one transaction. `None`: no library here (use the binary).
pub fn run(script: &str) -> Option<Result<(), String>> {
    let lib = lib()?;
    let script = match CString::new(script) {
        Ok(s) => s,
        Err(_) => return Some(Err("an nft script with a NUL byte".into())),
    };
    let lib = lib.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: ctx is live and used by this thread alone (the mutex); script is
    // NUL-terminated and outlives the call.
    let rc = unsafe { (lib.run)(lib.ctx, script.as_ptr()) };
    // Reading a buffer also rewinds it: both are read after every command, or they
    // would grow for the life of the process.
    // SAFETY: each buffer is a NUL-terminated string owned by the context, valid until
    // its next command (copied here, under the mutex).
    let read = |get: CtxStr| unsafe {
        let p = get(lib.ctx);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().trim().to_owned()
        }
    };
    let _ = read(lib.output);
    let errors = read(lib.errors);
    Some(if rc == 0 { Ok(()) } else { Err(errors) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syntax_error_is_reported_not_applied() {
        // Parsing fails before anything reaches the kernel, so this needs no privilege.
        // nextest runs each test in a process of its own: the opt-in is this test's.
        std::env::set_var(OPT_IN, "1");
        let result = run("this is not nft")
            .expect("libnftables loaded (scripts/setup.sh installs libnftables1)");
        let e = result.expect_err("a bad script fails");
        assert!(e.contains("syntax error") || e.contains("Error"), "{e}");
    }
}
