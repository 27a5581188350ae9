//! Who is calling: the bearer key (`or_…`, legacy `vl_…`, or any key of the server's key
//! store) and its workspace, plus the permission check every route makes.

use crate::error::ApiError;
use crate::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sandboxd_dialect_common::bearer_token;
use sandboxd_engine::{AccessDenied, Principal, SandboxAccess, WorkspaceId, DEFAULT_WORKSPACE};

/// Permissions of this dialect's routes.
pub mod perm {
    pub const CREATE: &str = "sandboxes.create";
    pub const READ: &str = "sandboxes.read";
    pub const UPDATE: &str = "sandboxes.update";
    pub const DELETE: &str = "sandboxes.delete";
    pub const EXEC: &str = "sandboxes.exec";
    pub const TEMPLATES_READ: &str = "sandbox-templates.read";
    pub const TEMPLATES_WRITE: &str = "sandbox-templates.write";
}

/// A grant that covers every `sandboxes.*` and `sandbox-templates.*` permission (the
/// other dialects' name for sandbox access).
const FAMILY: &str = "sandboxes";

/// The authenticated caller and the workspace (organization) it acts in.
pub struct Caller {
    pub ws: WorkspaceId,
    pub principal: Principal,
}

impl Caller {
    /// Refuses with the permission error unless the key holds `permission`, within the
    /// engine's [`SandboxAccess`] (the same for a key in every dialect).
    pub fn require(&self, permission: &str) -> Result<(), ApiError> {
        let needed = match permission {
            perm::READ | perm::TEMPLATES_READ => SandboxAccess::Read,
            _ => SandboxAccess::Write,
        };
        match self.principal.require_access(needed) {
            Err(AccessDenied::Scopes) => return Err(ApiError::scopes(permission)),
            Err(AccessDenied::Permission) => return Err(ApiError::permission(permission)),
            Ok(()) => {}
        }
        let family = (permission.starts_with("sandboxes.")
            || permission.starts_with("sandbox-templates."))
            && self.principal.allows(FAMILY);
        match self.principal.allows(permission) || family {
            true => Ok(()),
            false => Err(ApiError::permission(permission)),
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    /// A workspace-scoped key acts in its workspace; an account-scoped key in the
    /// default workspace.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let key = bearer_token(&parts.headers).ok_or_else(ApiError::unauthenticated)?;
        let principal = state
            .engine
            .authenticate(key)?
            .ok_or_else(ApiError::unauthenticated)?;
        let ws = principal
            .workspace
            .clone()
            .unwrap_or_else(|| DEFAULT_WORKSPACE.to_owned());
        Ok(Caller { ws, principal })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(perms: &[&str]) -> Caller {
        Caller {
            ws: "w".into(),
            principal: Principal {
                workspace: Some("w".into()),
                key_id: uuid::Uuid::new_v4(),
                permissions: perms.iter().map(|p| p.to_string()).collect(),
                scopes: Vec::new(),
            },
        }
    }

    #[test]
    fn permissions_exact_family_and_all() {
        assert!(caller(&["sandboxes.create"]).require(perm::CREATE).is_ok());
        let denied = caller(&["sandboxes.read"])
            .require(perm::CREATE)
            .unwrap_err();
        assert_eq!(denied.body.permission.as_deref(), Some("sandboxes.create"));
        assert!(caller(&["sandboxes"])
            .require(perm::TEMPLATES_WRITE)
            .is_ok());
        assert!(caller(&["*"]).require(perm::DELETE).is_ok());
        assert!(caller(&[]).require(perm::READ).is_err());
    }
}
