//! Inngest path ids, query parameters and field validators.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandboxd_dialect_inngest::params::{
    canonical_uuid, parse_follow, parse_mode, parse_tail_bytes, validate_command, validate_environment,
    validate_name, validate_path, PageQuery,
};
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Some(id) = canonical_uuid(s) {
        assert_eq!(id.hyphenated().to_string(), s);
    }
    let _ = validate_name(s);
    let _ = validate_path("path", s);
    let _ = parse_mode(Some(s));
    let _ = parse_tail_bytes(Some(s));
    let _ = parse_follow(Some(s));
    let parts: Vec<String> = s.split(' ').map(str::to_owned).collect();
    let _ = validate_command(&parts);
    let env: BTreeMap<String, String> =
        parts.chunks(2).map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default())).collect();
    let _ = validate_environment(&env);
    if let Ok(q) = serde_json::from_slice::<PageQuery>(data) {
        if let Ok(page) = q.page() {
            assert!((1..=250).contains(&page.limit));
        }
    }
});
