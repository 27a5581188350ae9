//! OpenRelay `Idempotency-Key` and `X-Resume-From` header parsing.
#![no_main]
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use sandboxd_dialect_openrelay::idempotency::{key, resume_from, KEY_HEADER, MAX_KEY_BYTES, RESUME_HEADER};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = HeaderValue::from_bytes(data) else { return };
    let mut headers = HeaderMap::new();
    headers.insert(KEY_HEADER, value.clone());
    headers.insert(RESUME_HEADER, value);
    if let Ok(Some(k)) = key(&headers) {
        assert!(!k.is_empty() && k.len() <= 2 * MAX_KEY_BYTES);
    }
    let _ = resume_from(&headers);
});
