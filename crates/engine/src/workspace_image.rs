//! A workspace's default image: the one its creates that name no image start from
//! (set by the operator with `sandboxd workspace set-image`).

use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::WorkspaceId;

impl Engine {
    /// The default image of `ws`, if its operator set one (else the built-in `default`).
    pub fn workspace_image(&self, ws: &WorkspaceId) -> Result<Option<String>, EngineError> {
        Ok(self.store.get_workspace_image(ws)?)
    }
}
