//! A started sandbox's `handle.json`, written into a file made ahead of time and then
//! renamed in: a reader finds no handle or a whole one, never a partial one.
//!
//! The file is made ahead ([`premake`]) when a warm init is made: off the request's
//! path for a server's pool, overlapped with the run's own opening for a one-shot
//! run's early init. On an ext4 without a journal (this project's test machines) the
//! allocation of an inode skips every inode of the parent's block group freed in the
//! last minute (six while its inode table block is dirty), and `sandboxes/` sees each
//! destroyed sandbox free a dozen. A burst of warm starts paid ~13% of the server's CPU
//! in that scan for `handle.json` alone (DWARF profile, 20 creates at once). Filling a
//! file that exists allocates no inode, and a rename to an unused name allocates none
//! either.

use crate::linux::io;
use crate::{RuntimeError, SandboxHandle};
use std::path::Path;

/// The handle's name in a sandbox's state dir.
const NAME: &str = "handle.json";
/// The file made ahead for it.
const NEXT: &str = ".handle.json.next";

/// Makes the empty file a later [`write`] in `state_dir` fills: root's alone (0600), as
/// a handle written without one is (`whole_file::fill`).
pub(in crate::linux) fn premake(state_dir: &Path) -> Result<(), RuntimeError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = state_dir.join(NEXT);
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map(drop)
        .map_err(io("making a sandbox's handle file ahead", &path))
}

/// Writes `handle` as `state_dir/handle.json` (replacing one there), through the file
/// [`premake`] made when there is one.
pub(in crate::linux) fn write(
    state_dir: &Path,
    handle: &SandboxHandle,
) -> Result<(), RuntimeError> {
    let next = state_dir.join(NEXT);
    let text = serde_json::to_string_pretty(handle).unwrap_or_default();
    // Filled, not truncated first (ext4 would write it out at its close).
    crate::linux::whole_file::fill(&next, &text)
        .map_err(io("writing the sandbox handle", &next))?;
    let path = state_dir.join(NAME);
    std::fs::rename(&next, &path).map_err(io("writing the sandbox handle", &path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn handle(dir: &Path) -> SandboxHandle {
        SandboxHandle {
            id: uuid::Uuid::new_v4(),
            agent_pid: 4242,
            agent_start_ticks: 7,
            agent_socket: dir.join("agent.sock"),
            state_dir: dir.to_owned(),
            host_id_base: 1 << 20,
            warm: false,
            isolation: Default::default(),
        }
    }

    #[test]
    fn the_premade_file_becomes_the_handle_and_no_other_file_stays() {
        let dir = tempfile::tempdir().expect("tempdir");
        premake(dir.path()).expect("premake");
        let premade = std::fs::metadata(dir.path().join(NEXT))
            .expect("premade")
            .ino();
        let h = handle(dir.path());
        write(dir.path(), &h).expect("write");
        let meta = std::fs::metadata(dir.path().join(NAME)).expect("handle");
        assert_eq!(meta.ino(), premade, "the handle is the file made ahead");
        assert_eq!(
            meta.mode() & 0o777,
            0o600,
            "a premade handle is root's alone"
        );
        let read: SandboxHandle =
            serde_json::from_slice(&std::fs::read(dir.path().join(NAME)).expect("read"))
                .expect("parse");
        assert_eq!(read.id, h.id);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(NAME)]);
    }

    #[test]
    fn without_a_premade_file_the_handle_is_made_and_an_old_one_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join(NAME),
            "old and much longer than the new text ".repeat(40),
        )
        .expect("old handle");
        // A file left by a write killed mid-way is truncated, not appended to.
        std::fs::write(dir.path().join(NEXT), "x".repeat(5000)).expect("stale next");
        let h = handle(dir.path());
        write(dir.path(), &h).expect("write");
        let read: SandboxHandle =
            serde_json::from_slice(&std::fs::read(dir.path().join(NAME)).expect("read"))
                .expect("parse");
        assert_eq!(read.id, h.id);
        assert!(!dir.path().join(NEXT).exists());
        std::fs::remove_file(dir.path().join(NAME)).expect("rm");
        write(dir.path(), &h).expect("write without a premade file");
        let meta = std::fs::metadata(dir.path().join(NAME)).expect("handle");
        assert_eq!(
            meta.mode() & 0o777,
            0o600,
            "a handle made at its write is root's alone"
        );
    }

    #[test]
    fn a_reader_beside_rewrites_finds_a_whole_handle_every_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = handle(dir.path());
        write(dir.path(), &h).expect("first write");
        let stop = std::sync::atomic::AtomicBool::new(false);
        let path = dir.path().join(NAME);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let bytes = std::fs::read(&path).expect("the handle is always there");
                    let read: SandboxHandle = serde_json::from_slice(&bytes)
                        .unwrap_or_else(|e| panic!("a partial handle ({e}): {bytes:?}"));
                    assert_eq!(read.id, h.id);
                    reads += 1;
                }
                reads
            });
            for _ in 0..2000 {
                write(dir.path(), &h).expect("rewrite");
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(reader.join().expect("reader") > 0);
        });
    }
}
