//! Numbered-line test data (`seq 1 N`) for the output tests: a hole or a repeat anywhere
//! in delivered output shows as a mismatch with the expected bytes.

#![allow(dead_code)]

/// The first `len` bytes of `seq 1 N` (N large enough), as the shell prints them.
pub fn seq_prefix(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 16);
    let mut i = 1u64;
    while out.len() < len {
        out.extend_from_slice(format!("{i}\n").as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// A shell command writing exactly `len` bytes of numbered lines to stdout.
pub fn seq_cmd(len: usize) -> String {
    format!("seq 1 99999999 | head -c {len}")
}

/// Panics, naming the first differing offset, unless `got == want` (no huge dumps).
pub fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let around = |v: &[u8]| {
        String::from_utf8_lossy(
            &v[first.saturating_sub(20).min(v.len())..(first + 20).min(v.len())],
        )
        .into_owned()
    };
    panic!(
        "{what}: got {} bytes, want {}; first difference at {first}: got {:?}, want {:?}",
        got.len(),
        want.len(),
        around(got),
        around(want)
    );
}

/// Panics unless `got` is one contiguous run of `seq` output, starting at a line
/// boundary of `all` (the retained tail of a ring may start anywhere on a chunk; a chunk
/// starts where a read started, so any offset is allowed: `got` must occur in `all`).
pub fn assert_contiguous(got: &[u8], all: &[u8], what: &str) {
    if got.is_empty() {
        return;
    }
    // Find where `got` starts: its first full line names its position.
    let probe = got.len().min(64);
    let start = all
        .windows(probe)
        .position(|w| w == &got[..probe])
        .unwrap_or_else(|| panic!("{what}: the first bytes delivered are not seq output"));
    assert!(
        start + got.len() <= all.len(),
        "{what}: more bytes than written"
    );
    assert_same(got, &all[start..start + got.len()], what);
}
