//! Opaque pagination cursors (URL-safe base64 of the last item's sort key).

use crate::error::EngineError;
use crate::model::{Page, PageRequest};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sandboxd_store::Keyset;
use time::OffsetDateTime;
use uuid::Uuid;

/// Items per page when the caller asks for 0.
pub const DEFAULT_PAGE: u32 = 50;
/// Most items per page.
pub const MAX_PAGE: u32 = 1000;

/// The effective page size of a request.
pub(crate) fn page_size(limit: u32) -> u32 {
    match limit {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    }
}

fn bad() -> EngineError {
    EngineError::invalid("invalid pagination cursor")
}

pub(crate) fn encode_keyset(created_at: OffsetDateTime, id: Uuid) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}:{id}", created_at.unix_timestamp_nanos()))
}

pub(crate) fn decode_keyset(cursor: &str) -> Result<Keyset, EngineError> {
    let raw = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| bad())?;
    let text = String::from_utf8(raw).map_err(|_| bad())?;
    let (nanos, id) = text.split_once(':').ok_or_else(bad)?;
    let nanos: i128 = nanos.parse().map_err(|_| bad())?;
    Ok(Keyset {
        created_at: OffsetDateTime::from_unix_timestamp_nanos(nanos).map_err(|_| bad())?,
        id: Uuid::parse_str(id).map_err(|_| bad())?,
    })
}

/// The keyset a page request continues after.
pub(crate) fn after(page: &PageRequest) -> Result<Option<Keyset>, EngineError> {
    page.cursor.as_deref().map(decode_keyset).transpose()
}

/// Cuts `rows` (fetched with one extra) to `limit` items, with a cursor after the last
/// item when there are more.
pub(crate) fn keyset_page<T>(
    mut rows: Vec<T>,
    limit: u32,
    key: impl Fn(&T) -> (OffsetDateTime, Uuid),
) -> Page<T> {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next_cursor = match (more, rows.last()) {
        (true, Some(last)) => {
            let (at, id) = key(last);
            Some(encode_keyset(at, id))
        }
        _ => None,
    };
    Page {
        items: rows,
        next_cursor,
    }
}

pub(crate) fn encode_id(id: Uuid) -> String {
    URL_SAFE_NO_PAD.encode(id.as_bytes())
}

pub(crate) fn decode_id(cursor: &str) -> Result<Uuid, EngineError> {
    let raw = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| bad())?;
    Uuid::from_slice(&raw).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let at = OffsetDateTime::from_unix_timestamp_nanos(1_800_000_000_000_000_001).unwrap();
        let id = Uuid::new_v4();
        let k = decode_keyset(&encode_keyset(at, id)).unwrap();
        assert_eq!((k.created_at, k.id), (at, id));
        assert_eq!(decode_id(&encode_id(id)).unwrap(), id);
        assert!(decode_keyset("!!").is_err());
        assert!(decode_keyset(&URL_SAFE_NO_PAD.encode("x:y")).is_err());
        assert!(decode_id("AAAA").is_err());
    }

    #[test]
    fn page_sizes_are_bounded() {
        assert_eq!(page_size(0), DEFAULT_PAGE);
        assert_eq!(page_size(7), 7);
        assert_eq!(page_size(u32::MAX), MAX_PAGE);
    }
}
