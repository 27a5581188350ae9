//! Who may call: the bearer key, its membership of the path's tenant, and the
//! permission (and legacy scope) the route needs.

use crate::error::ApiError;
use crate::AppState;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use sandboxd_dialect_common::bearer_token;
use sandboxd_engine::{AccessDenied, Principal, SandboxAccess, WorkspaceId};
use std::collections::HashMap;

/// Permission to read sandboxes (get, list).
pub const READ: &str = "sandboxes:read";
/// Permission to change sandboxes (create, delete, exec, terminal tickets).
pub const WRITE: &str = "sandboxes:write";
/// The only legacy scope this API accepts (the engine's rule, the same in every dialect).
pub use sandboxd_engine::ALL_SCOPE;

/// The tenant's workspace, reached by a member key that holds the route's permission.
pub struct Tenant {
    pub workspace: WorkspaceId,
    pub tenant_id: String,
    /// The key the request authenticated with.
    pub key_id: uuid::Uuid,
}

/// A caller allowed to read the tenant's sandboxes.
pub struct Reader(pub Tenant);
/// A caller allowed to change the tenant's sandboxes.
pub struct Writer(pub Tenant);

/// Whether `principal` may act with `permission`: a key with legacy scopes must hold
/// `all:all`, which then works within the permissions its creator granted it.
/// The engine's [`SandboxAccess`] decides first, so a key means the same in every dialect.
pub fn check(principal: &Principal, permission: &str) -> Result<(), ApiError> {
    let needed = match permission {
        READ => SandboxAccess::Read,
        _ => SandboxAccess::Write,
    };
    match principal.require_access(needed) {
        Err(AccessDenied::Scopes) => {
            return Err(ApiError::forbidden(
                "api_key_scope_required",
                "this API key's scopes do not allow sandbox operations",
            ))
        }
        Ok(()) => {
            let implied = permission == READ && principal.allows(WRITE);
            if principal.allows(permission) || implied {
                return Ok(());
            }
        }
        Err(AccessDenied::Permission) => {}
    }
    Err(ApiError::forbidden(
        "permission_required",
        format!("the {permission} permission is required"),
    ))
}

/// Authenticates the key and resolves `{tenant_id}`. A tenant that does not exist is
/// answered like one the key is not a member of (403), so tenants cannot be probed.
pub async fn tenant(
    parts: &mut Parts,
    state: &AppState,
    permission: &str,
) -> Result<Tenant, ApiError> {
    let key = bearer_token(&parts.headers).ok_or_else(ApiError::unauthorized)?;
    let principal = state
        .engine
        .authenticate(key)
        .map_err(|e| ApiError::engine(crate::error::Op::Sandboxes, e))?
        .ok_or_else(ApiError::unauthorized)?;
    let params = Path::<HashMap<String, String>>::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::invalid(e.body_text()))?;
    let tenant_id = params.0.get("tenant_id").cloned().unwrap_or_default();
    let workspace = state
        .engine
        .workspace_by_alias(crate::ids::DIALECT, &tenant_id)
        .map_err(|e| ApiError::engine(crate::error::Op::Sandboxes, e))?
        .map(|ws| ws.id)
        .filter(|ws| principal.can_use(ws))
        .ok_or_else(|| {
            ApiError::forbidden(
                "tenant_membership_required",
                "this key is not a member of the tenant",
            )
        })?;
    check(&principal, permission)?;
    Ok(Tenant {
        workspace,
        tenant_id,
        key_id: principal.key_id,
    })
}

impl FromRequestParts<AppState> for Reader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(Reader(tenant(parts, state, READ).await?))
    }
}

impl FromRequestParts<AppState> for Writer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(Writer(tenant(parts, state, WRITE).await?))
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
    fn permissions_and_scopes() {
        let code = |r: Result<(), ApiError>| r.err().map(|e| e.code);
        assert_eq!(code(check(&key(&[WRITE], &[]), WRITE)), None);
        assert_eq!(code(check(&key(&[WRITE], &[]), READ)), None);
        assert_eq!(code(check(&key(&["*"], &[]), WRITE)), None);
        assert_eq!(
            code(check(&key(&[READ], &[]), WRITE)),
            Some("permission_required")
        );
        assert_eq!(code(check(&key(&[WRITE], &[ALL_SCOPE]), WRITE)), None);
        assert_eq!(
            code(check(&key(&[READ], &[ALL_SCOPE]), WRITE)),
            Some("permission_required")
        );
        assert_eq!(
            code(check(&key(&[WRITE], &["deployments:read"]), WRITE)),
            Some("api_key_scope_required")
        );
    }
}
