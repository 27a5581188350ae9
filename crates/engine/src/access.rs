//! What an API key may do to sandboxes, decided once here for every dialect: its legacy
//! scopes first (a key with scopes lacking `all:all` may do nothing), then whether its
//! permissions grant only reads or also changes.

use crate::accounts::{Principal, ALL_PERMISSIONS};

/// The legacy scope that lets a scoped key act (within its permissions).
pub const ALL_SCOPE: &str = "all:all";

/// Permissions, in any dialect's spelling, that allow only reading sandboxes or templates:
/// Runzivo's `sandboxes:read`, OpenRelay's `sandboxes.read` and `sandbox-templates.read`.
const READ_PERMISSIONS: [&str; 3] = ["sandboxes:read", "sandboxes.read", "sandbox-templates.read"];

/// How far a key reaches into sandboxes, the same in every dialect. Each dialect refuses
/// (in its own 403 shape) what the level does not cover, then still applies its own
/// permission names within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SandboxAccess {
    /// No sandbox operation at all, not even a read.
    None,
    /// Reads only (get, list, metrics, logs, file downloads, template lists).
    Read,
    /// Reads and changes (create, exec, files, pause, delete, templates).
    Write,
}

/// Why a key does not reach a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessDenied {
    /// The key has legacy scopes and none of them is `all:all`.
    Scopes,
    /// The key's permissions do not grant the level.
    Permission,
}

impl Principal {
    /// Whether the key's legacy scopes allow sandbox operations: no scopes (a permission
    /// key) or `all:all` among them.
    pub fn scopes_allow_sandboxes(&self) -> bool {
        self.scopes.is_empty() || self.scopes.iter().any(|s| s == ALL_SCOPE)
    }

    /// The key's level: `None` when its scopes forbid sandbox operations; otherwise what
    /// its permissions grant (`*` or any sandbox permission other than a read one is
    /// `Write`; only read permissions is `Read`).
    pub fn sandbox_access(&self) -> SandboxAccess {
        if !self.scopes_allow_sandboxes() {
            return SandboxAccess::None;
        }
        let sandbox = |p: &str| p.starts_with("sandboxes") || p.starts_with("sandbox-templates");
        let writes = self.permissions.iter().any(|p| {
            p == ALL_PERMISSIONS || (sandbox(p) && !READ_PERMISSIONS.contains(&p.as_str()))
        });
        let reads = self
            .permissions
            .iter()
            .any(|p| READ_PERMISSIONS.contains(&p.as_str()));
        match (writes, reads) {
            (true, _) => SandboxAccess::Write,
            (false, true) => SandboxAccess::Read,
            (false, false) => SandboxAccess::None,
        }
    }

    /// Whether the key reaches `needed`; the error says whether its scopes or its
    /// permissions stop it (dialects answer these with different codes).
    pub fn require_access(&self, needed: SandboxAccess) -> Result<(), AccessDenied> {
        if !self.scopes_allow_sandboxes() {
            return Err(AccessDenied::Scopes);
        }
        match self.sandbox_access() >= needed {
            true => Ok(()),
            false => Err(AccessDenied::Permission),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(permissions: &[&str], scopes: &[&str]) -> Principal {
        Principal {
            workspace: None,
            key_id: uuid::Uuid::nil(),
            permissions: permissions.iter().map(|s| s.to_string()).collect(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn scopes_then_permissions() {
        use SandboxAccess::*;
        assert_eq!(key(&["*"], &[]).sandbox_access(), Write);
        assert_eq!(key(&["*"], &[ALL_SCOPE]).sandbox_access(), Write);
        assert_eq!(key(&["*"], &["billing:read"]).sandbox_access(), None);
        assert_eq!(key(&["*"], &["sandboxes:read"]).sandbox_access(), None);
        assert_eq!(key(&["sandboxes"], &[]).sandbox_access(), Write);
        assert_eq!(key(&["sandboxes:write"], &[]).sandbox_access(), Write);
        assert_eq!(key(&["sandboxes.exec"], &[]).sandbox_access(), Write);
        assert_eq!(key(&["sandboxes:read"], &[]).sandbox_access(), Read);
        assert_eq!(
            key(&["sandboxes.read"], &[ALL_SCOPE]).sandbox_access(),
            Read
        );
        assert_eq!(key(&["secrets:write"], &[]).sandbox_access(), None);
        assert_eq!(
            key(&["*"], &["billing:read"]).require_access(Read),
            Err(AccessDenied::Scopes)
        );
        assert_eq!(
            key(&["sandboxes:read"], &[]).require_access(Write),
            Err(AccessDenied::Permission)
        );
        assert_eq!(key(&["sandboxes:read"], &[]).require_access(Read), Ok(()));
    }
}
