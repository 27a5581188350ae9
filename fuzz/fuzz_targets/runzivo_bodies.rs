//! Runzivo create bodies and terminal control messages.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandboxd_dialect_runzivo::fuzzing;

fuzz_target!(|data: &[u8]| {
    fuzzing::create(data);
    fuzzing::control(data);
});
