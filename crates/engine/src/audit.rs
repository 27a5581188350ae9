//! The audit trail: each mutating operation (sandbox create, destroy, pause, resume,
//! snapshot; snapshot delete; template build and delete) appended to the store with its
//! workspace, the key that asked, the request, the target and the outcome; read back
//! per workspace, pruned after a retention, and bounded per workspace (its newest
//! 100,000 entries; operations that found no target are not recorded).

use crate::engine::Engine;
use crate::error::EngineError;
use sandboxd_store::AuditRecord;
use time::OffsetDateTime;

/// Most entries one read returns.
pub const MAX_READ: u32 = 10_000;

/// Actions that make something: recorded whatever their outcome.
const MAKES: [&str; 2] = ["sandbox.create", "template.build"];

/// Outcomes of operations that found no target: not recorded (see [`Engine::audit`]).
const NO_TARGET: [crate::error::ErrorCode; 3] = [
    crate::error::ErrorCode::SandboxNotFound,
    crate::error::ErrorCode::SnapshotNotFound,
    crate::error::ErrorCode::ImageNotFound,
];

/// The entry for `action` on `target` in `ws` ended by `outcome`, with the current
/// request's caller and id.
pub(crate) fn audit_record(
    ws: &str,
    action: &str,
    target: Option<String>,
    outcome: &str,
) -> AuditRecord {
    AuditRecord {
        at: OffsetDateTime::now_utc(),
        workspace: ws.to_owned(),
        key_id: crate::request::current_actor(),
        request_id: crate::request::current_id(),
        action: action.to_owned(),
        target: target.map(bounded_target),
        outcome: outcome.to_owned(),
    }
}

/// Longest target kept, in bytes (ids and names are far shorter; a client's 60 KB
/// template name is cut here, marked with `…`).
pub const MAX_TARGET_BYTES: usize = 256;

fn bounded_target(mut target: String) -> String {
    if target.len() > MAX_TARGET_BYTES {
        let mut end = MAX_TARGET_BYTES;
        while !target.is_char_boundary(end) {
            end -= 1;
        }
        target.truncate(end);
        target.push('…');
    }
    target
}

/// One audit entry as the engine hands it out.
pub type AuditEntry = AuditRecord;

impl Engine {
    /// Appends an entry for `action` on `target` in `ws` ended by `result`, with the
    /// current request's caller and id. A store failure is logged, never the
    /// operation's failure.
    pub(crate) fn audit<T>(
        &self,
        ws: &str,
        action: &str,
        target: Option<String>,
        result: &Result<T, EngineError>,
    ) {
        let outcome = match result {
            Ok(_) => "ok",
            // An operation on a sandbox, snapshot or template the caller has not (a
            // guessed id, another workspace's) changed nothing: not recorded, so that a
            // flood of them neither grows the database nor pushes the workspace's real
            // entries out of its bounded trail. A create or build refused for a missing
            // image or snapshot is still recorded (creates are rate-limited).
            Err(e) if NO_TARGET.contains(&e.code) && !MAKES.contains(&action) => return,
            Err(e) => e.code.as_str(),
        };
        let rec = audit_record(ws, action, target, outcome);
        let appended = crate::faults::store_write("store.insert_audit")
            .and_then(|()| Ok(self.store.insert_audit(&rec)?));
        if let Err(e) = appended {
            tracing::warn!(error = %e, action, "cannot append to the audit trail");
        }
    }

    /// A workspace's audit entries at or after `since`, oldest first.
    pub fn audit_entries(
        &self,
        ws: &str,
        since: OffsetDateTime,
    ) -> Result<Vec<AuditEntry>, EngineError> {
        Ok(self.store.list_audit(ws, since, MAX_READ)?)
    }

    /// Removes entries older than `days` days (0 keeps everything); returns how many.
    pub fn prune_audit(&self, days: u32) -> Result<u64, EngineError> {
        if days == 0 {
            return Ok(0);
        }
        let days = std::time::Duration::from_secs(u64::from(days) * 86_400);
        match crate::lifecycle::before_now(days) {
            Some(before) => Ok(self.store.prune_audit(before)?),
            // Past the calendar's start: nothing is that old.
            None => Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Regression (REVIEW13 #5): a 60 KB template name was stored whole in every entry.
    #[test]
    fn long_targets_are_cut_at_a_char_boundary() {
        let long = "é".repeat(40_000);
        let rec = super::audit_record("w", "template.delete", Some(long), "ok");
        let kept = rec.target.expect("target");
        assert!(
            kept.len() <= super::MAX_TARGET_BYTES + '…'.len_utf8(),
            "{}",
            kept.len()
        );
        assert!(kept.ends_with('…'));
        let short = super::audit_record("w", "sandbox.create", Some("abc".into()), "ok");
        assert_eq!(short.target.as_deref(), Some("abc"));
    }
}
