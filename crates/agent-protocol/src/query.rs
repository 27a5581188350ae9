//! Percent-encoding of query strings, shared by the client (encode) and agent (decode).

/// Percent-encodes `s` for use as one query-string value (RFC 3986 unreserved kept).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Why a query string could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("bad percent-escape in query string")]
    BadEscape,
    #[error("query string is not valid UTF-8")]
    NotUtf8,
}

/// Decodes one percent-encoded component (`+` means space).
pub fn decode_component(s: &str) -> Result<String, QueryError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or(QueryError::BadEscape)?;
                let hex = std::str::from_utf8(hex).map_err(|_| QueryError::BadEscape)?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| QueryError::BadEscape)?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| QueryError::NotUtf8)
}

/// Splits and decodes `a=1&b=2` into pairs (a key without `=` gets an empty value).
pub fn parse_query(q: &str) -> Result<Vec<(String, String)>, QueryError> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode_component(k)?, decode_component(v)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_awkward_values() {
        for s in ["/tmp/a b", "/x/%&=+?#", "/ünï/çødé", "plain"] {
            assert_eq!(decode_component(&encode_component(s)).as_deref(), Ok(s));
        }
    }

    #[test]
    fn parses_pairs_and_rejects_bad_escapes() {
        let q = parse_query("path=%2Fa%20b&follow=true&flag").unwrap();
        assert_eq!(q[0], ("path".into(), "/a b".into()));
        assert_eq!(q[1], ("follow".into(), "true".into()));
        assert_eq!(q[2], ("flag".into(), String::new()));
        assert_eq!(parse_query("p=%zz"), Err(QueryError::BadEscape));
        assert_eq!(parse_query("p=%2"), Err(QueryError::BadEscape));
        assert_eq!(parse_query("p=%ff"), Err(QueryError::NotUtf8));
    }
}
