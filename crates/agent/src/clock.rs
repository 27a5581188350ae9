//! Timestamps as the protocol writes them: RFC 3339 in UTC with nanoseconds.

use std::time::SystemTime;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Formats `t`; falls back to the epoch string if formatting ever fails.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    OffsetDateTime::from(t)
        .format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_with_nanoseconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20.123456789Z");
    }
}
