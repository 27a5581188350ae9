//! Caps on what the host reads from an agent: the agent inside a sandbox is untrusted
//! (a tenant can even answer in its place), so no answer held in memory, and no line of
//! a stream, may grow past a fixed size.

/// Most bytes of any answer read whole (a process list included), unless the call's own
/// cap is smaller. Past it the call fails with [`crate::ClientError::TooLarge`].
pub const MAX_ANSWER_BYTES: u64 = 16 * 1024 * 1024;
/// Most bytes of a small answer: health, a signal's or an upload's acknowledgement, the
/// error body of a refused call, one process's info.
pub const SMALL_ANSWER_BYTES: u64 = 1024 * 1024;
/// Most bytes of one NDJSON line of an output or log stream (a chunk is at most 32 KiB
/// of output, 44 KiB in base64; an `Exit` frame carries one process's info).
pub const MAX_FRAME_BYTES: u64 = 1024 * 1024;
/// Room for an exec answer's JSON beyond its base64 output (fields, quotes, padding).
pub const EXEC_FRAMING_BYTES: u64 = 64 * 1024;
/// The agent's cap on an exec's output when a request sends `max_output_bytes: 0`.
pub const DEFAULT_EXEC_OUTPUT: u64 = 16 * 1024 * 1024;

/// Most bytes of a managed process's command line the agent keeps for listing (the
/// process runs with all of it): a prefix of whole arguments, the last one cut at a
/// character boundary, and at most [`KEPT_ARGS`] arguments.
pub const KEPT_ARGV_BYTES: usize = 1024;
/// Most arguments of a managed process's command line the agent keeps for listing.
pub const KEPT_ARGS: usize = 64;
/// Most ended processes whose metadata the agent keeps (the oldest ended are forgotten
/// first): with running ones bounded by the sandbox's PID limit, a process list
/// stays well under [`MAX_ANSWER_BYTES`].
pub const KEPT_ENDED_PROCESSES: usize = 1024;

/// Most bytes one process's info may take in a process list: its kept command line
/// ([`KEPT_ARGV_BYTES`] of it, each byte escaped to at most 6 in JSON, with quotes and
/// commas for [`KEPT_ARGS`] arguments) and its other fields, with room to spare.
pub const PROCESS_INFO_BYTES: u64 = 8 * 1024;
/// Room for a process list's JSON beyond its entries.
const PROCESS_LIST_FRAMING_BYTES: u64 = 1024;

/// The most bytes a page of at most `limit` processes (0: all of them) can take: the
/// cap on the agent's answer, and the room the host holds for it.
pub fn process_page_answer_bytes(limit: u32) -> u64 {
    match limit {
        0 => MAX_ANSWER_BYTES,
        n => u64::from(n)
            .saturating_mul(PROCESS_INFO_BYTES)
            .saturating_add(PROCESS_LIST_FRAMING_BYTES)
            .min(MAX_ANSWER_BYTES),
    }
}

/// The most bytes an exec's answer can take when its output (stdout and stderr
/// together) is capped at `max_output_bytes` (0: the agent's default): both in base64,
/// plus framing.
pub fn exec_answer_bytes(max_output_bytes: u64) -> u64 {
    let cap = match max_output_bytes {
        0 => DEFAULT_EXEC_OUTPUT,
        n => n,
    };
    // Two base64 strings: each rounds its share up to a whole 4-byte group.
    (cap / 3 + 2)
        .saturating_mul(4)
        .saturating_add(EXEC_FRAMING_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_answer_fits_its_output_in_base64() {
        use base64::Engine as _;
        let b64 = |n: usize| base64::engine::general_purpose::STANDARD.encode(vec![7u8; n]);
        for cap in [1u64, 2, 3, 4, 1000, 65_537] {
            for out in [0, 1, 2, cap / 2, cap].into_iter().filter(|o| *o <= cap) {
                let err = (cap - out) as usize;
                let both = b64(out as usize).len() + b64(err).len();
                assert!((both as u64) < exec_answer_bytes(cap) - EXEC_FRAMING_BYTES + 1);
            }
        }
        assert_eq!(exec_answer_bytes(0), exec_answer_bytes(DEFAULT_EXEC_OUTPUT));
        assert_eq!(exec_answer_bytes(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_process_page_fits_its_processes_with_their_longest_kept_command_lines() {
        // The worst kept command line: KEPT_ARGS arguments of control characters
        // (each escaped as \u00XX), KEPT_ARGV_BYTES in all.
        let arg = "\u{1}".repeat(KEPT_ARGV_BYTES / KEPT_ARGS);
        let info = crate::ProcessInfo {
            id: uuid::Uuid::new_v4(),
            argv: vec![arg; KEPT_ARGS],
            pid: u32::MAX,
            state: crate::ProcessState::Killed,
            started_at: "2026-12-02T17:00:00.123456789Z".into(),
            ended_at: Some("2026-12-02T17:00:00.123456789Z".into()),
            exit_code: Some(i32::MIN),
            signal: Some(i32::MIN),
            output_retained: true,
            argv_truncated: true,
        };
        let one = serde_json::to_vec(&info).expect("json").len() as u64;
        assert!(one <= PROCESS_INFO_BYTES, "{one} bytes");
        let page = serde_json::to_vec(&vec![info; 251]).expect("json").len() as u64;
        assert!(page <= process_page_answer_bytes(251), "{page} bytes");
        assert_eq!(process_page_answer_bytes(0), MAX_ANSWER_BYTES);
        assert_eq!(process_page_answer_bytes(u32::MAX), MAX_ANSWER_BYTES);
        assert!(process_page_answer_bytes(251) < 4 << 20);
    }
}
