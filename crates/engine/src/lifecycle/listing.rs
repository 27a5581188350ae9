//! Views of a workspace's sandboxes by state: the active ones newest first, and the
//! history of ended ones by end time.

use crate::convert::entry_from_record;
use crate::cursor;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::{Page, PageRequest, Sandbox, WorkspaceId};
use crate::state::ACTIVE_STATUSES;
use time::OffsetDateTime;

impl Engine {
    /// The workspace's active sandboxes (any non-terminal status), newest first
    /// (created_at DESC, id DESC). Expired ones are ended first and left out.
    pub async fn list_active(
        &self,
        ws: &WorkspaceId,
        page: PageRequest,
    ) -> Result<Page<Sandbox>, EngineError> {
        self.expire_due().await;
        let limit = cursor::page_size(page.limit);
        let after = cursor::after(&page)?.map(|k| (k.created_at, k.id));
        let mut items = Vec::new();
        for rec in self.store.sandboxes_in_status(&ACTIVE_STATUSES)? {
            if rec.workspace == *ws {
                items.push(entry_from_record(rec)?.sb);
            }
        }
        items.sort_by(|a, b| (b.created_at, b.id).cmp(&(a.created_at, a.id)));
        items.retain(|s| after.is_none_or(|k| (s.created_at, s.id) < k));
        items.truncate(limit as usize + 1);
        Ok(cursor::keyset_page(items, limit, |s| (s.created_at, s.id)))
    }

    /// Sandboxes of the workspace that ended at or after `since`, most recently ended
    /// first (ended_at DESC, id DESC).
    pub async fn list_ended(
        &self,
        ws: &WorkspaceId,
        since: OffsetDateTime,
        page: PageRequest,
    ) -> Result<Page<Sandbox>, EngineError> {
        self.expire_due().await;
        let limit = cursor::page_size(page.limit);
        let rows = self
            .store
            .ended_sandboxes(ws, since, limit + 1, cursor::after(&page)?)?;
        let items = rows
            .into_iter()
            .map(|r| entry_from_record(r).map(|e| e.sb))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(cursor::keyset_page(items, limit, |s| {
            (s.ended_at.unwrap_or(s.created_at), s.id)
        }))
    }
}
