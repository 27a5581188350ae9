//! Errors of the persistence layer.

/// Everything a store can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error")]
    Sqlite(#[source] rusqlite::Error),
    /// The database's write lock stayed taken (by another process or by our own other
    /// writes) for longer than a write waits: retry later.
    #[error("the database is busy")]
    Busy,
    /// The database's filesystem is full (even after its reserve was given up).
    #[error("the database's disk is full")]
    Full,
    #[error("cannot {what} at {path}")]
    Io {
        what: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A unique key (workspace id, key hash, snapshot id…) is already used.
    #[error("{0} already exists")]
    Conflict(String),
    /// The record to update does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// A stored value could not be decoded (corrupt row, wrong secret key…).
    #[error("corrupt stored value: {0}")]
    Corrupt(String),
    #[error("secret encryption failed")]
    Crypto,
    /// The database was written by a newer version of sandboxd.
    #[error("database schema version {found} is newer than this build knows ({known})")]
    SchemaTooNew { found: i64, known: i64 },
}

impl From<rusqlite::Error> for StoreError {
    /// A lock that outlasted SQLite's busy handler becomes `Busy`.
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                StoreError::Busy
            }
            Some(rusqlite::ErrorCode::DiskFull) => StoreError::Full,
            _ => StoreError::Sqlite(e),
        }
    }
}
