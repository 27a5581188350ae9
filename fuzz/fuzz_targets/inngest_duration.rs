//! Go durations (`1h2m3.5s`) of the Inngest dialect and its bounded timeouts.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandboxd_dialect_inngest::duration::{parse_go_duration, parse_timeout};
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = parse_go_duration(s);
    if let Ok(d) = parse_timeout(s, Duration::from_secs(300)) {
        assert!(d <= Duration::from_secs(300));
    }
});
