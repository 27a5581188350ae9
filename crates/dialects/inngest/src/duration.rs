//! Go `time.ParseDuration` syntax (`1m30s`, `500ms`, `1.5h`), as the API's timeouts use.

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError(pub String);

const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a non-negative Go duration. A sign is refused (the API wants positive values).
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let bad = || DurationError(format!("invalid duration {input:?}"));
    if input == "0" {
        return Ok(Duration::ZERO);
    }
    if input.is_empty() {
        return Err(bad());
    }
    let mut rest = input;
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(tail) => tail.split_at(tail.bytes().take_while(u8::is_ascii_digit).count()),
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad());
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .ok_or_else(bad)?
            .1;
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| bad())?
        };
        total_ns = whole
            .checked_mul(scale)
            .and_then(|v| v.checked_add(total_ns))
            .and_then(|v| v.checked_add(fraction_ns(frac_part, scale)))
            .ok_or_else(bad)?;
        rest = after;
    }
    let secs = u64::try_from(total_ns / 1_000_000_000).map_err(|_| bad())?;
    Ok(Duration::new(secs, (total_ns % 1_000_000_000) as u32))
}

/// `0.<digits>` of `scale` nanoseconds, truncated like Go. Digits past the 18th are
/// below a nanosecond even for hours, and more would overflow `value * scale`.
fn fraction_ns(digits: &str, scale: u128) -> u128 {
    let mut value: u128 = 0;
    let mut divisor: u128 = 1;
    for d in digits.bytes().take(18) {
        value = value * 10 + u128::from(d - b'0');
        divisor *= 10;
    }
    value * scale / divisor
}

/// Parses a timeout that must be greater than zero and at most `max`.
pub fn parse_timeout(input: &str, max: Duration) -> Result<Duration, DurationError> {
    let value = parse_go_duration(input)?;
    if value.is_zero() {
        return Err(DurationError("timeout must be greater than zero".into()));
    }
    if value > max {
        return Err(DurationError(format!(
            "timeout must be at most {}s",
            max.as_secs()
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> u128 {
        parse_go_duration(s).unwrap().as_millis()
    }

    #[test]
    fn parses_go_forms() {
        assert_eq!(ms("30s"), 30_000);
        assert_eq!(ms("1m30s"), 90_000);
        assert_eq!(ms("500ms"), 500);
        assert_eq!(ms("1.5h"), 5_400_000);
        assert_eq!(ms(".5s"), 500);
        assert_eq!(ms("1h2m3s4ms"), 3_723_004);
        assert_eq!(
            parse_go_duration("1500us").unwrap(),
            Duration::from_micros(1500)
        );
        assert_eq!(parse_go_duration("7ns").unwrap(), Duration::from_nanos(7));
        assert_eq!(ms("0"), 0);
    }

    /// Found by the `inngest_duration` fuzz target: 30 fraction digits of an hour
    /// overflowed `u128` (a panic in debug builds, a wrong value in release).
    #[test]
    fn long_fractions_of_large_units_do_not_overflow() {
        let long = format!("1.{}h", "9".repeat(40));
        let d = parse_go_duration(&long).unwrap();
        assert_eq!(d.as_secs(), 7199);
        assert!(parse_go_duration(&format!("0.{}h", "2".repeat(100))).is_ok());
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "", "5", "s", "1x", "-1s", "+1s", "1s 2s", "1..5s", "1e3s", "1S", ".",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn bounds_timeouts() {
        let max = Duration::from_secs(300);
        assert_eq!(parse_timeout("5m", max).unwrap(), max);
        assert!(parse_timeout("5m1ns", max).is_err());
        assert!(parse_timeout("0s", max).is_err());
        assert!(parse_timeout("0", max).is_err());
    }
}
