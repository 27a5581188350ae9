//! `get` and `list`: reading sandboxes of a workspace.

use crate::convert::entry_from_record;
use crate::cursor;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::lifecycle::is_due;
use crate::model::{Page, PageRequest, Sandbox, WorkspaceId};
use time::OffsetDateTime;
use uuid::Uuid;

impl Engine {
    /// One sandbox of `ws` (ended first if its timeout passed).
    pub async fn get(&self, ws: &WorkspaceId, id: Uuid) -> Result<Sandbox, EngineError> {
        self.expire_if_due(ws, id).await?;
        Ok(self.load(ws, id)?.sb)
    }

    /// The newest sandbox of `ws` ever created with `name` (ended ones included); a
    /// dialect whose IDs are not UUIDs keeps its ID as the sandbox's name.
    pub async fn find_named(
        &self,
        ws: &WorkspaceId,
        name: &str,
    ) -> Result<Option<Sandbox>, EngineError> {
        let newest = self
            .store
            .sandboxes_named(ws, name)?
            .into_iter()
            .max_by_key(|rec| rec.created_at);
        match newest {
            Some(rec) => Ok(Some(self.get(ws, rec.id).await?)),
            None => Ok(None),
        }
    }

    /// The workspace's sandboxes, newest first (created_at DESC, id DESC), terminated
    /// ones included.
    pub async fn list(
        &self,
        ws: &WorkspaceId,
        page: PageRequest,
    ) -> Result<Page<Sandbox>, EngineError> {
        self.list_where(ws, page, |_| true).await
    }

    /// [`Engine::list`] of the sandboxes `keep` accepts. The filter applies before
    /// pagination: every page but the last is full, and the last has no cursor.
    pub async fn list_where(
        &self,
        ws: &WorkspaceId,
        page: PageRequest,
        keep: impl Fn(&Sandbox) -> bool,
    ) -> Result<Page<Sandbox>, EngineError> {
        let limit = cursor::page_size(page.limit);
        let mut after = cursor::after(&page)?;
        let mut items = Vec::new();
        while items.len() <= limit as usize {
            let rows = self.store.list_sandboxes(ws, limit + 1, after)?;
            let exhausted = rows.len() <= limit as usize;
            for rec in rows {
                let mut sb = entry_from_record(rec)?.sb;
                after = Some(sandboxd_store::Keyset {
                    created_at: sb.created_at,
                    id: sb.id,
                });
                if is_due(&sb, OffsetDateTime::now_utc()) {
                    self.expire_if_due(ws, sb.id).await?;
                    sb = self.load(ws, sb.id)?.sb;
                }
                if keep(&sb) {
                    items.push(sb);
                }
            }
            if exhausted {
                break;
            }
        }
        Ok(cursor::keyset_page(items, limit, |s| (s.created_at, s.id)))
    }
}
