//! Conversions between Rust values and SQLite columns (times, uuids, JSON).

use crate::error::StoreError;
use rusqlite::Row;
use serde::de::DeserializeOwned;
use time::OffsetDateTime;
use uuid::Uuid;

/// Times are stored as unix nanoseconds so that they sort and compare as integers.
pub(super) fn ts(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos()).unwrap_or(i64::MAX)
}

pub(super) fn opt_ts(t: Option<OffsetDateTime>) -> Option<i64> {
    t.map(ts)
}

pub(super) fn json<T: serde::Serialize>(v: &T) -> String {
    // Serializing maps/vectors of strings cannot fail.
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

fn corrupt(col: &str, what: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        Box::new(StoreError::Corrupt(format!("{col}: {what}"))),
    )
}

pub(super) fn get_ts(row: &Row, col: &str) -> rusqlite::Result<OffsetDateTime> {
    let n: i64 = row.get(col)?;
    OffsetDateTime::from_unix_timestamp_nanos(n.into()).map_err(|e| corrupt(col, e))
}

pub(super) fn get_opt_ts(row: &Row, col: &str) -> rusqlite::Result<Option<OffsetDateTime>> {
    let n: Option<i64> = row.get(col)?;
    n.map(|n| OffsetDateTime::from_unix_timestamp_nanos(n.into()).map_err(|e| corrupt(col, e)))
        .transpose()
}

pub(super) fn get_uuid(row: &Row, col: &str) -> rusqlite::Result<Uuid> {
    let s: String = row.get(col)?;
    Uuid::parse_str(&s).map_err(|e| corrupt(col, e))
}

pub(super) fn get_opt_uuid(row: &Row, col: &str) -> rusqlite::Result<Option<Uuid>> {
    let s: Option<String> = row.get(col)?;
    s.map(|s| Uuid::parse_str(&s).map_err(|e| corrupt(col, e)))
        .transpose()
}

pub(super) fn get_json<T: DeserializeOwned>(row: &Row, col: &str) -> rusqlite::Result<T> {
    let s: String = row.get(col)?;
    serde_json::from_str(&s).map_err(|e| corrupt(col, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_through_nanoseconds() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let t = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_789).unwrap();
        let back = conn
            .query_row("SELECT ?1 AS t", [ts(t)], |r| get_ts(r, "t"))
            .unwrap();
        assert_eq!(back, t);
    }
}
