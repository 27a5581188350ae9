//! What the `runsc` in use can do, read once from its own flag list (`runsc flags`)
//! and `runsc --version`: never guessed from a version number.
//!
//! Debian bookworm's runsc (20221219) cannot save a TCP endpoint of the sandbox's link
//! that is connected or closing: a checkpoint that meets one fails and ends the sandbox.
//! bookworm-backports' (20240729) has `--net-disconnect-ok`, which gives the link the
//! `CapabilityDisconnectOk`: such connections are reset when the sandbox is saved, and
//! the checkpoint goes on. Only with it may a sandbox with egress go to disk.

use std::path::Path;
use std::process::{Command, Stdio};

/// The global flag that lets a checkpoint reset open connections of the link.
pub const NET_DISCONNECT_OK: &str = "net-disconnect-ok";

/// What a `runsc` binary supports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    /// `runsc --version`'s first line (`runsc version 0.0~20240729.0`), for logs.
    pub version: String,
    /// It has `--net-disconnect-ok`: a sandbox with egress can be checkpointed (its open
    /// TCP connections are reset).
    pub net_disconnect_ok: bool,
}

impl Features {
    /// Asks `exe` (its flag list and version); a runsc that does not answer has none
    /// of the optional features.
    pub fn detect(exe: &Path) -> Features {
        let flags = output(exe, &["flags"]);
        Features {
            version: output(exe, &["--version"])
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
            net_disconnect_ok: has_flag(&flags, NET_DISCONNECT_OK),
        }
    }
}

/// Whether `runsc flags`' listing (Go's flag usage: `  -name type` lines, each followed
/// by its description) names the flag `name`.
pub fn has_flag(listing: &str, name: &str) -> bool {
    listing.lines().any(|line| {
        line.trim_start()
            .strip_prefix('-')
            .and_then(|rest| rest.split_whitespace().next())
            == Some(name)
    })
}

/// Stdout and stderr of `exe args` together (Go's flag package prints to stderr);
/// empty when it cannot run.
fn output(exe: &Path, args: &[&str]) -> String {
    match Command::new(exe).args(args).stdin(Stdio::null()).output() {
        Ok(out) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            text
        }
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "  -net-raw\n    \tenable raw sockets. When false, raw sockets are \
                       disabled by removing CAP_NET_RAW from containers (`runsc exec` will \
                       still be able to utilize raw sockets). Raw sockets allow malicious \
                       containers to craft packets and potentially attack the network.\n  \
                       -network value\n    \tspecifies which network to use: sandbox \
                       (default), host, none.\n";
    const NEW: &str = "  -net-disconnect-ok\n    \tIndicates whether the link endpoint \
                       capability CapabilityDisconnectOk should be set. This allows open \
                       connections to be disconnected upon save.\n  -net-raw runsc exec\n";

    #[test]
    fn the_flag_is_found_only_as_a_flag_name() {
        assert!(has_flag(NEW, NET_DISCONNECT_OK));
        assert!(!has_flag(OLD, NET_DISCONNECT_OK));
        // Named in a description, it is not a flag.
        assert!(!has_flag(
            "  -other\n    \tsee -net-disconnect-ok elsewhere\n",
            "disconnect-ok"
        ));
        assert!(!has_flag("  -net-disconnect-ok-not\n", NET_DISCONNECT_OK));
    }

    #[test]
    fn a_runsc_that_does_not_run_has_no_features() {
        let f = Features::detect(Path::new("/nonexistent/runsc"));
        assert_eq!(f, Features::default());
    }
}
