//! A listing tool whose reader went away (`sandboxd keys list | head`) ends quietly, by
//! SIGPIPE as `ls` does, not with a panic and a backtrace.

mod serve_bin;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// Regression (REVIEW13 #12): the print of a closed pipe panicked (exit 101, backtrace).
#[test]
fn a_listing_whose_reader_is_gone_ends_by_sigpipe_without_a_panic() {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader); // the reader is gone before the tool writes
    let out = Command::new(serve_bin::BIN)
        .args(["openapi", "--dialect", "inngest"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("run sandboxd openapi");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        out.status
    );
}
