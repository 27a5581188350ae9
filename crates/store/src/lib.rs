//! Persistence: the `Store` trait and its embedded SQLite implementation.
