//! Workspace secrets: values are only ever stored encrypted and never listed.

use crate::accounts::Accounts;
use crate::error::{EngineError, ErrorCode};
use crate::model::WorkspaceId;
use crate::validate;

impl Accounts<'_> {
    /// Creates or replaces a secret, exposed to sandboxes as an environment variable.
    pub fn set_secret(&self, ws: &WorkspaceId, name: &str, value: &str) -> Result<(), EngineError> {
        validate::env_name(name)?;
        if value.contains('\0') {
            return Err(EngineError::invalid(
                "a secret value must not contain NUL bytes",
            ));
        }
        Ok(self.store.set_secret(ws, name, value.as_bytes())?)
    }

    /// Names of the workspace's secrets, sorted.
    pub fn list_secret_names(&self, ws: &WorkspaceId) -> Result<Vec<String>, EngineError> {
        Ok(self.store.list_secret_names(ws)?)
    }

    pub fn delete_secret(&self, ws: &WorkspaceId, name: &str) -> Result<(), EngineError> {
        match self.store.delete_secret(ws, name)? {
            true => Ok(()),
            false => Err(EngineError::new(
                ErrorCode::SecretNotFound,
                format!("secret {name:?} not found"),
            )),
        }
    }
}
