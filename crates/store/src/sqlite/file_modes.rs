//! The database's files are the server's user's alone (`0600`): they hold API keys'
//! hashes, every workspace's records and sealed secrets.

use crate::StoreError;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Makes the database file `0600` when missing (SQLite gives its `-wal` and `-shm` files
/// the database's mode), and tightens it and its `-wal`/`-shm` files of this user's that
/// an older build left looser (`0644`).
pub fn make_private(db: &Path) -> Result<(), StoreError> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(db)
        .map_err(|source| StoreError::Io {
            what: "create the database file",
            path: db.to_owned(),
            source,
        })?;
    let uid = nix::unistd::geteuid().as_raw();
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let path = Path::new(&name);
        // Through a descriptor opened without following a symlink.
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(path)
        else {
            continue;
        };
        let failed = |source| StoreError::Io {
            what: "make the database file private",
            path: path.to_owned(),
            source,
        };
        let meta = file.metadata().map_err(failed)?;
        if meta.is_file() && meta.uid() == uid && meta.mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(failed)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new database is `0600`; an older build's `0644` one (and its `-wal`) is
    /// tightened; a symlink in their place is not followed.
    #[test]
    fn makes_new_files_private_and_tightens_old_ones_not_through_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").mode() & 0o7777;
        let fresh = dir.path().join("new.db");
        make_private(&fresh).expect("new");
        assert_eq!(mode(&fresh), 0o600);
        let old = dir.path().join("old.db");
        let wal = dir.path().join("old.db-wal");
        for p in [&old, &wal] {
            std::fs::write(p, b"").expect("write");
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        make_private(&old).expect("old");
        assert_eq!((mode(&old), mode(&wal)), (0o600, 0o600));
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"").expect("write");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        std::os::unix::fs::symlink(&target, dir.path().join("linked.db-shm")).expect("symlink");
        make_private(&dir.path().join("linked.db")).expect("linked");
        assert_eq!(mode(&target), 0o644, "followed a symlink");
    }
}
