//! Entry points for the fuzz targets in `fuzz/`: the create body validated exactly as
//! its handler does, and the terminal's control messages, with the invariants an
//! accepted input must hold.

use crate::routes::sandboxes::CreateBody;
use crate::routes::terminal::Control;
use sandboxd_dialect_common::json::parse_strict;

/// `POST …/sandboxes`: an accepted body names the sandbox with a valid `sbx_` id and
/// bounds its lifetime to 1 s – 24 h.
pub fn create(data: &[u8]) {
    if let Ok(Ok(req)) = parse_strict::<CreateBody>(data).map(CreateBody::into_request) {
        assert!(req
            .aliases
            .get(crate::ids::DIALECT)
            .is_some_and(|id| crate::ids::is_valid(id)));
        assert!(req
            .timeout
            .is_none_or(|t| (1..=86_400).contains(&t.as_secs())));
    }
}

/// A terminal control message (`{"type":"resize",…}`) never panics when decoded.
pub fn control(data: &[u8]) {
    let _ = serde_json::from_slice::<Control>(data);
}
