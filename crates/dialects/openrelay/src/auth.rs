//! Who is calling: the bearer key (`or_…`, legacy `vl_…`, or any key of the server's key
//! store) and its workspace, plus the permission check every route makes.

use crate::error::ApiError;
use crate::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sandboxd_dialect_common::bearer_token;
use sandboxd_engine::{Principal, WorkspaceId, DEFAULT_WORKSPACE};

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

/// A grant that covers every `sandboxes.*` permission (the other dialects' name).
const FAMILY: &str = "sandboxes";

/// The authenticated caller and the workspace (organization) it acts in.
pub struct Caller {
    pub ws: WorkspaceId,
    pub principal: Principal,
}

impl Caller {
    /// Refuses with the permission error unless the key holds `permission`.
    pub fn require(&self, permission: &str) -> Result<(), ApiError> {
        let family = permission.starts_with("sandboxes.") && self.principal.allows(FAMILY);
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
