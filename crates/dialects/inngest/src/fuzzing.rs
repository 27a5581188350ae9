//! Entry points for the fuzz targets in `fuzz/`: each request body of the dialect parsed
//! strictly and validated exactly as its handler does, with the invariants that a body
//! the dialect accepts must hold.

use crate::routes::exec::ExecBody;
use crate::routes::processes::{SignalBody, StartBody};
use crate::routes::sandboxes::CreateBody;
use sandboxd_dialect_common::json::parse_strict;

/// `POST /v2/sandboxes`: an accepted create has a valid name and no zero resources
/// unless it clones a snapshot.
pub fn create(data: &[u8]) {
    if let Ok(Ok(req)) = parse_strict::<CreateBody>(data).map(CreateBody::into_request) {
        let name = req.name.unwrap_or_default();
        assert!((1..=63).contains(&name.len()), "accepted name {name:?}");
        let zero = req.resources.vcpu == 0 || req.resources.memory_mb == 0;
        assert!(
            !zero || req.snapshot_id.is_some(),
            "zero resources without a snapshot"
        );
    }
}

/// `POST …/exec`: an accepted command starts with an absolute path and times out
/// within 5 minutes.
pub fn exec(data: &[u8]) {
    if let Ok(Ok(cmd)) = parse_strict::<ExecBody>(data).map(ExecBody::into_command) {
        assert!(cmd.argv.first().is_some_and(|a| a.starts_with('/')));
        assert!(!cmd.timeout.is_zero() && cmd.timeout.as_secs() <= 300);
    }
}

/// `POST …/processes` and `POST …/signals`.
pub fn process(data: &[u8]) {
    if let Ok(Ok(cmd)) = parse_strict::<StartBody>(data).map(StartBody::into_command) {
        assert!(cmd.argv.first().is_some_and(|a| a.starts_with('/')));
        assert!(cmd.cwd.as_deref().is_none_or(|c| c.starts_with('/')));
    }
    if let Ok(body) = parse_strict::<SignalBody>(data) {
        if let Ok(signal) = body.signal() {
            assert!((1..=64).contains(&signal));
        }
    }
}
