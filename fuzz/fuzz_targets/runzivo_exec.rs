//! Runzivo exec bodies: strict JSON into `ExecBody`, then `validate`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandboxd_dialect_common::json::parse_strict;
use sandboxd_dialect_runzivo::exec_request::ExecBody;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = parse_strict::<ExecBody>(data) {
        if let Ok(req) = body.validate() {
            assert!(req.cwd.starts_with('/'));
            assert!(!req.cmd.trim().is_empty());
        }
    }
});
