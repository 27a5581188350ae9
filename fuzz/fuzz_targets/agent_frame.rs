//! NDJSON frames from the agent: each line decodes into a `Frame` or is refused.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandboxd_agent_protocol::{ExecResult, Frame, ProcessInfo};

fuzz_target!(|data: &[u8]| {
    for line in data.split(|b| *b == b'\n') {
        if let Ok(frame) = serde_json::from_slice::<Frame>(line) {
            // What decodes must encode again.
            let _ = serde_json::to_vec(&frame).expect("re-encode frame");
        }
    }
    let _ = serde_json::from_slice::<ExecResult>(data);
    let _ = serde_json::from_slice::<ProcessInfo>(data);
});
