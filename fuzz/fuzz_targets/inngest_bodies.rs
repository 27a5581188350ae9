//! Inngest request bodies (create, exec, process start, signal): strict JSON, then the
//! handlers' own validation, with the invariants an accepted body must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandboxd_dialect_inngest::fuzzing;

fuzz_target!(|data: &[u8]| {
    fuzzing::create(data);
    fuzzing::exec(data);
    fuzzing::process(data);
});
