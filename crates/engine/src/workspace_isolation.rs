//! A workspace's default isolation tier (set by the operator with `sandboxd workspace
//! set-isolation`), and the tier a create resolves to: the request's, else its
//! template's (folded into the request by the dialect), else the workspace's, else the
//! server's.

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::WorkspaceId;
use sandboxd_runtime::Isolation;

/// A stored tier name read back.
pub(crate) fn parse_stored(name: &str) -> Result<Isolation, EngineError> {
    name.parse().map_err(|_| {
        EngineError::new(
            ErrorCode::Internal,
            format!("corrupt isolation tier {name:?} in the database"),
        )
    })
}

impl Engine {
    /// The default tier of `ws`, if its operator set one.
    pub fn workspace_isolation(&self, ws: &WorkspaceId) -> Result<Option<Isolation>, EngineError> {
        self.store
            .get_workspace_isolation(ws)?
            .map(|name| parse_stored(&name))
            .transpose()
    }

    /// The tier a create of `ws` asking for `requested` (its own or its template's
    /// choice) runs on.
    pub fn isolation_for(
        &self,
        ws: &WorkspaceId,
        requested: Option<Isolation>,
    ) -> Result<Isolation, EngineError> {
        if let Some(tier) = requested {
            return Ok(tier);
        }
        Ok(self
            .workspace_isolation(ws)?
            .unwrap_or(self.limits.isolation))
    }

    /// Whether this server can start sandboxes of tier `isolation`; why not as an
    /// `Unavailable` error (e.g. the gVisor tier without `runsc`).
    pub fn check_tier(&self, isolation: Isolation) -> Result<(), EngineError> {
        self.runtime.offers(isolation).map_err(|e| {
            let why = match &e {
                sandboxd_runtime::RuntimeError::Unsupported(why) => why.clone(),
                other => other.to_string(),
            };
            EngineError::with_source(
                ErrorCode::Unavailable,
                format!("this server cannot run {isolation} sandboxes: {why}"),
                e,
            )
        })
    }
}
