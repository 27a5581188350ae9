//! Room of the data dir claimed by image pulls, imports and builds under way, in any
//! process: one accounting that they all take their room from, and that sandboxes' disk
//! admission (`disk_space`) sees too.
//!
//! Each writer holds one claim file `.room-claims/<uuid>` under an exclusive `flock` for
//! its life; the file says how many bytes and inodes it was granted and has not written
//! yet (`"<bytes> <inodes>\n"`). A claim whose lock is free belongs to a writer that
//! ended (a killed one included): it counts nothing and the next new claim removes it.
//! Grants are made under the exclusive lock of `.room-claims/.lock`, so two writers
//! never both take the same free room; readers take it shared.

use super::file_lock::{How, Locked};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

const DIR: &str = ".room-claims";
const LOCK: &str = ".lock";

/// Bytes and inodes granted and not written yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Claimed {
    pub bytes: u64,
    pub inodes: u64,
}

/// The claims directory of `data_dir`.
fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join(DIR)
}

fn flock_err(path: &Path) -> impl FnOnce((std::fs::File, std::io::Error)) -> std::io::Error + '_ {
    move |(_, e)| std::io::Error::new(e.kind(), format!("locking {}: {e}", path.display()))
}

/// The claims lock of `data_dir`: exclusive to grant, shared to read.
pub struct ClaimsLock(#[allow(dead_code)] Locked);

/// Takes the claims lock (blocking), making the claims directory if needed.
pub fn lock(data_dir: &Path, exclusive: bool) -> std::io::Result<ClaimsLock> {
    let dir = dir(data_dir);
    match std::fs::create_dir(&dir) {
        Ok(()) => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let path = dir.join(LOCK);
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    let arg = match exclusive {
        true => How::Exclusive,
        false => How::Shared,
    };
    Locked::lock(file, arg)
        .map(ClaimsLock)
        .map_err(flock_err(&path))
}

/// One writer's claim; removed when dropped.
pub struct Claim {
    path: PathBuf,
    file: Locked,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Claim {
    /// A new claim of nothing yet, made under the exclusive `lock` (which also removes
    /// the claims of writers that ended).
    pub fn new(data_dir: &Path, _lock: &ClaimsLock) -> std::io::Result<Claim> {
        let dir = dir(data_dir);
        for entry in std::fs::read_dir(&dir)?.flatten() {
            if entry.file_name().as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let Ok(file) = std::fs::File::open(entry.path()) else {
                continue;
            };
            if Locked::lock(file, How::ExclusiveNow).is_ok() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let path = dir.join(uuid::Uuid::new_v4().to_string());
        let file = std::fs::File::options()
            .write(true)
            .create_new(true)
            .open(&path)?;
        let file = Locked::lock(file, How::ExclusiveNow).map_err(flock_err(&path))?;
        Ok(Claim { path, file })
    }

    /// Records `claimed` as this writer's grant (under the exclusive lock).
    pub fn set(&mut self, claimed: Claimed, _lock: &ClaimsLock) -> std::io::Result<()> {
        let text = format!("{} {}\n", claimed.bytes, claimed.inodes);
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(text.as_bytes())
    }

    fn name(&self) -> Option<&std::ffi::OsStr> {
        self.path.file_name()
    }
}

/// What the live claims of `data_dir` hold, but for `except` (under `lock`, either way).
pub fn outstanding(
    data_dir: &Path,
    except: Option<&Claim>,
    _lock: &ClaimsLock,
) -> std::io::Result<Claimed> {
    let entries = match std::fs::read_dir(dir(data_dir)) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Claimed::default()),
        Err(e) => return Err(e),
    };
    let skip = except.and_then(Claim::name);
    let mut sum = Claimed::default();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.as_encoded_bytes().starts_with(b".") || Some(name.as_os_str()) == skip {
            continue;
        }
        let Ok(file) = std::fs::File::open(entry.path()) else {
            continue;
        };
        // Lockable: its writer ended, and it holds nothing.
        let mut file = match Locked::lock(file, How::SharedNow) {
            Ok(_) => continue,
            Err((file, _)) => file,
        };
        let mut text = String::new();
        if file.read_to_string(&mut text).is_err() {
            continue;
        }
        let mut it = text
            .split_whitespace()
            .map(|n| n.parse::<u64>().unwrap_or(0));
        sum.bytes = sum.bytes.saturating_add(it.next().unwrap_or(0));
        sum.inodes = sum.inodes.saturating_add(it.next().unwrap_or(0));
    }
    Ok(sum)
}

/// What the live claims of `data_dir` hold (nothing when there is no claims dir).
pub fn total(data_dir: &Path) -> std::io::Result<Claimed> {
    if !dir(data_dir).is_dir() {
        return Ok(Claimed::default());
    }
    let lock = lock(data_dir, false)?;
    outstanding(data_dir, None, &lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_claims_count_and_ended_ones_do_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ex = lock(dir.path(), true).expect("lock");
        let mut a = Claim::new(dir.path(), &ex).expect("claim");
        let mut b = Claim::new(dir.path(), &ex).expect("claim");
        a.set(
            Claimed {
                bytes: 10,
                inodes: 2,
            },
            &ex,
        )
        .expect("set");
        b.set(
            Claimed {
                bytes: 5,
                inodes: 1,
            },
            &ex,
        )
        .expect("set");
        assert_eq!(
            outstanding(dir.path(), Some(&a), &ex).expect("sum"),
            Claimed {
                bytes: 5,
                inodes: 1
            }
        );
        // A writer that ended without removing its file (killed): its lock is free.
        let left = b.path.clone();
        let kept = std::fs::read(&left).expect("read");
        drop(b);
        std::fs::write(&left, kept).expect("write");
        assert_eq!(
            outstanding(dir.path(), None, &ex).expect("sum"),
            Claimed {
                bytes: 10,
                inodes: 2
            }
        );
        let _c = Claim::new(dir.path(), &ex).expect("claim");
        assert!(
            !left.exists(),
            "an ended claim is removed by the next new claim"
        );
        drop(ex);
        assert_eq!(
            total(dir.path()).expect("total"),
            Claimed {
                bytes: 10,
                inodes: 2
            }
        );
    }
}
