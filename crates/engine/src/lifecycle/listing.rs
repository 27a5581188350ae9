//! Views of a workspace's sandboxes by state: the active ones newest first, and the
//! history of ended ones by end time.

use crate::convert::entry_from_record;
use crate::cursor;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::{Page, PageRequest, Sandbox, WorkspaceId};
use crate::state::ACTIVE_STATUSES;
use sandboxd_store::Keyset;
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
                items.push(entry_from_record(rec, self.limits.isolation)?.sb);
            }
        }
        items.sort_by_key(|s| std::cmp::Reverse((s.created_at, s.id)));
        items.retain(|s| after.is_none_or(|k| (s.created_at, s.id) < k));
        items.truncate(limit as usize + 1);
        Ok(cursor::keyset_page(items, limit, |s| (s.created_at, s.id)))
    }

    /// Sandboxes of the workspace that ended at or after `since` and that `keep`
    /// accepts, most recently ended first (ended_at DESC, id DESC). The filter applies
    /// before pagination, so every page but the last is full.
    pub async fn list_ended(
        &self,
        ws: &WorkspaceId,
        since: OffsetDateTime,
        page: PageRequest,
        keep: impl Fn(&Sandbox) -> bool,
    ) -> Result<Page<Sandbox>, EngineError> {
        self.expire_due().await;
        let limit = cursor::page_size(page.limit);
        let mut after = cursor::after(&page)?;
        let mut items = Vec::new();
        while items.len() <= limit as usize {
            let rows = self.store.ended_sandboxes(ws, since, limit + 1, after)?;
            let exhausted = rows.len() <= limit as usize;
            for rec in rows {
                let sb = entry_from_record(rec, self.limits.isolation)?.sb;
                after = Some(Keyset {
                    created_at: ended_key(&sb),
                    id: sb.id,
                });
                if keep(&sb) {
                    items.push(sb);
                }
            }
            if exhausted {
                break;
            }
        }
        Ok(cursor::keyset_page(items, limit, |s| (ended_key(s), s.id)))
    }
}

fn ended_key(sb: &Sandbox) -> OffsetDateTime {
    sb.ended_at.unwrap_or(sb.created_at)
}
