//! `get` and `list`: reading sandboxes of a workspace.

use crate::convert::entry_from_record;
use crate::cursor;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::lifecycle::is_due;
use crate::model::{Page, PageRequest, Sandbox, WorkspaceId};
use sandboxd_store::SandboxFilter;
use time::OffsetDateTime;
use uuid::Uuid;

impl Engine {
    /// One sandbox of `ws` (ended first if its timeout passed).
    pub async fn get(&self, ws: &WorkspaceId, id: Uuid) -> Result<Sandbox, EngineError> {
        self.expire_if_due(ws, id).await?;
        Ok(self.load(ws, id)?.sb)
    }

    /// The sandbox of `ws` that `dialect` knows as `alias` (ended ones included); a
    /// dialect whose ids are not UUIDs gives its id as an alias at create.
    pub async fn find_by_alias(
        &self,
        ws: &WorkspaceId,
        dialect: &str,
        alias: &str,
    ) -> Result<Option<Sandbox>, EngineError> {
        match self.store.sandbox_by_alias(dialect, alias)? {
            Some(rec) if &rec.workspace == ws => Ok(Some(self.get(ws, rec.id).await?)),
            _ => Ok(None),
        }
    }

    /// The workspace's sandboxes, newest first (created_at DESC, id DESC), terminated
    /// ones included.
    pub async fn list(
        &self,
        ws: &WorkspaceId,
        page: PageRequest,
    ) -> Result<Page<Sandbox>, EngineError> {
        self.list_aliased(ws, None, page).await
    }

    /// [`Engine::list`] of the sandboxes `dialect` has an alias for (all for `None`).
    /// The store filters before paging: every page but the last is full, and the last
    /// has no cursor.
    pub async fn list_aliased(
        &self,
        ws: &WorkspaceId,
        dialect: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<Sandbox>, EngineError> {
        let limit = cursor::page_size(page.limit);
        let after = cursor::after(&page)?;
        let filter = SandboxFilter {
            aliased_in: dialect,
        };
        let rows = self.store.list_sandboxes(ws, filter, limit + 1, after)?;
        let mut items = Vec::with_capacity(rows.len());
        for rec in rows {
            let mut sb = entry_from_record(rec, self.limits.isolation)?.sb;
            if is_due(&sb, OffsetDateTime::now_utc()) {
                self.expire_if_due(ws, sb.id).await?;
                sb = self.load(ws, sb.id)?.sb;
            }
            items.push(sb);
        }
        Ok(cursor::keyset_page(items, limit, |s| (s.created_at, s.id)))
    }
}
