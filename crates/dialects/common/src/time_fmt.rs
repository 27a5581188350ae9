//! Timestamp formats used on the wire: RFC 3339 with nanoseconds, and HTTP dates.

use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::{OffsetDateTime, UtcOffset};

const RFC3339_NANOS: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:9]Z");

const HTTP_DATE: &[BorrowedFormatItem<'static>] = format_description!(
    "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
);

/// `2026-07-28T19:00:00.123456789Z`: UTC, always nine fractional digits.
pub fn rfc3339_nanos(at: OffsetDateTime) -> String {
    at.to_offset(UtcOffset::UTC)
        .format(RFC3339_NANOS)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000000000Z".to_owned())
}

/// `Tue, 28 Jul 2026 19:00:00 GMT` (RFC 9110 IMF-fixdate).
pub fn http_date(at: OffsetDateTime) -> String {
    at.to_offset(UtcOffset::UTC)
        .format(HTTP_DATE)
        .unwrap_or_else(|_| "Thu, 01 Jan 1970 00:00:00 GMT".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn formats_nanoseconds_in_utc() {
        let at = datetime!(2026-07-28 21:00:00.5 +02:00);
        assert_eq!(rfc3339_nanos(at), "2026-07-28T19:00:00.500000000Z");
        let at = datetime!(2026-07-28 19:00:00.123456789 UTC);
        assert_eq!(rfc3339_nanos(at), "2026-07-28T19:00:00.123456789Z");
    }

    #[test]
    fn formats_http_dates() {
        let at = datetime!(2026-07-28 19:00:00 UTC);
        assert_eq!(http_date(at), "Tue, 28 Jul 2026 19:00:00 GMT");
    }
}
