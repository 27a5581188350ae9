//! The dialects' shared strict JSON body parser and bearer-token header parsing.
#![no_main]
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use sandboxd_dialect_common::{auth::bearer_token, json::parse_strict};

fuzz_target!(|data: &[u8]| {
    let _ = parse_strict::<serde_json::Value>(data);
    if let Ok(v) = HeaderValue::from_bytes(data) {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, v);
        let _ = bearer_token(&headers);
    }
});
