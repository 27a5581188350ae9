//! One-time sign-in codes of the web console: made by `sandboxd console link` beside a
//! running server (straight on the store), spent once by the server's `/console/login`.

use crate::accounts::Accounts;
use crate::error::EngineError;
use crate::model::WorkspaceId;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

/// How long a sign-in code may wait before it is used.
pub const CONSOLE_CODE_TTL: time::Duration = time::Duration::minutes(10);

fn hash(code: &str) -> String {
    hex::encode(Sha256::digest(code.as_bytes()))
}

impl Accounts<'_> {
    /// A new sign-in code for workspace `ws` (which must exist), valid for `ttl`; only
    /// its hash is stored.
    pub fn create_console_code(
        &self,
        ws: &str,
        ttl: time::Duration,
    ) -> Result<String, EngineError> {
        if self.get_workspace(ws)?.is_none() {
            return Err(EngineError::invalid(format!("no workspace {ws:?}")));
        }
        let random = || uuid::Uuid::new_v4().simple().to_string();
        let code = format!("{}{}", random(), random());
        let now = OffsetDateTime::now_utc();
        self.store
            .insert_console_code(&hash(&code), ws, now + ttl, now)?;
        Ok(code)
    }

    /// Spends `code`: its workspace when it was outstanding and unexpired; `None` for a
    /// used, expired or unknown code.
    pub fn redeem_console_code(&self, code: &str) -> Result<Option<WorkspaceId>, EngineError> {
        Ok(self
            .store
            .redeem_console_code(&hash(code), OffsetDateTime::now_utc())?)
    }
}
