//! Query-string decoding of the agent protocol; what decodes re-encodes to itself.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandboxd_agent_protocol::query::{decode_component, encode_component, parse_query};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = parse_query(s);
    if let Ok(decoded) = decode_component(s) {
        let encoded = encode_component(&decoded);
        assert_eq!(decode_component(&encoded).expect("decode encoded"), decoded);
    }
});
