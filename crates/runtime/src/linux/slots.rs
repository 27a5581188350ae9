//! Host id ranges: each sandbox owns a 65536-wide slot of host uids/gids, recorded as a
//! file under `data_dir/slots/` so a restarted server never hands out a live slot.

use crate::RuntimeError;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use uuid::Uuid;

/// First host id of slot 0.
pub const FIRST_BASE: u32 = 0x1000_0000;
/// Ids per sandbox (uid 0..65535 inside).
pub const RANGE: u32 = 65536;
/// Slots available (keeps every base well below `u32::MAX`).
pub const MAX_SLOTS: u32 = 8192;

/// Allocator over the slot files of one data directory.
pub struct Slots {
    dir: PathBuf,
    next: AtomicU32,
}

impl Slots {
    pub fn new(data_dir: &Path) -> Result<Self, RuntimeError> {
        let dir = data_dir.join("slots");
        std::fs::create_dir_all(&dir).map_err(|source| RuntimeError::Io {
            what: "creating the slot directory",
            path: dir.clone(),
            source,
        })?;
        Ok(Slots {
            dir,
            next: AtomicU32::new(0),
        })
    }

    /// Claims a free slot for `id` and returns its host id base.
    pub fn allocate(&self, id: Uuid) -> Result<u32, RuntimeError> {
        let start = self.next.fetch_add(1, Ordering::Relaxed) % MAX_SLOTS;
        for i in 0..MAX_SLOTS {
            let slot = (start + i) % MAX_SLOTS;
            let path = self.dir.join(slot.to_string());
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(_) => {
                    std::fs::write(&path, id.to_string()).map_err(|source| RuntimeError::Io {
                        what: "recording a slot",
                        path,
                        source,
                    })?;
                    self.next.store(slot + 1, Ordering::Relaxed);
                    return Ok(FIRST_BASE + slot * RANGE);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => {
                    return Err(RuntimeError::Io {
                        what: "claiming a slot",
                        path,
                        source,
                    })
                }
            }
        }
        Err(RuntimeError::IdRangesExhausted)
    }

    /// Gives the slot of `base`, held by `from`, to `to`.
    pub fn hand_over(&self, base: u32, from: Uuid, to: Uuid) -> Result<(), RuntimeError> {
        let path = self.path_of(base).ok_or(RuntimeError::IdRangesExhausted)?;
        let io = |source| RuntimeError::Io {
            what: "handing over a slot",
            path: path.clone(),
            source,
        };
        match std::fs::read_to_string(&path).map_err(io)?.trim() == from.to_string() {
            true => std::fs::write(&path, to.to_string()).map_err(io),
            false => Err(io(std::io::Error::other(format!(
                "the slot is not {from}'s"
            )))),
        }
    }

    fn path_of(&self, base: u32) -> Option<PathBuf> {
        if base < FIRST_BASE || (base - FIRST_BASE) & (RANGE - 1) != 0 {
            return None;
        }
        Some(self.dir.join(((base - FIRST_BASE) / RANGE).to_string()))
    }

    /// Frees the slot of `base` if `id` holds it (idempotent).
    pub fn free(&self, base: u32, id: Uuid) {
        let Some(path) = self.path_of(base) else {
            return;
        };
        if std::fs::read_to_string(&path).is_ok_and(|owner| owner.trim() == id.to_string()) {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_distinct_and_survive_a_new_allocator() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let base_a = Slots::new(dir.path())
            .expect("slots")
            .allocate(a)
            .expect("a");
        let base_b = Slots::new(dir.path())
            .expect("slots")
            .allocate(b)
            .expect("b");
        assert_ne!(base_a, base_b);
        assert_eq!((base_a - FIRST_BASE) % RANGE, 0);
        let slots = Slots::new(dir.path()).expect("slots");
        slots.free(base_a, b); // not the owner: kept
        assert!(dir.path().join("slots/0").exists());
        let c = Uuid::new_v4();
        assert!(slots.hand_over(base_a, b, c).is_err(), "b does not hold it");
        slots.hand_over(base_a, a, c).expect("a hands it to c");
        slots.free(base_a, a); // no longer the owner: kept
        assert!(dir.path().join("slots/0").exists());
        slots.free(base_a, c);
        assert!(!dir.path().join("slots/0").exists());
    }
}
