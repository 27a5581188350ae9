//! The master workspace's account page: its API keys (never the keys themselves) and
//! its quota. Read-only; keys and quotas change with `sandboxd keys` and `sandboxd quota`.

use super::reader;
use crate::error::ApiError;
use crate::session::Session;
use crate::Console;
use axum::extract::State;
use axum::{Extension, Json};
use sandboxd_engine::DEFAULT_WORKSPACE;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;

pub async fn account(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
) -> Result<Json<Value>, ApiError> {
    let ws = reader(&s)?.to_owned();
    if ws != DEFAULT_WORKSPACE {
        return Err(ApiError::forbidden(
            "keys and quotas are shown to the master workspace's console only",
        ));
    }
    let at = |t: time::OffsetDateTime| t.format(&Rfc3339).unwrap_or_default();
    let keys: Vec<Value> = c
        .engine
        .accounts()
        .list_keys(Some(&ws))?
        .iter()
        .map(|k| {
            json!({
                "id": k.id, "prefix": k.prefix, "permissions": k.permissions,
                "scopes": k.scopes, "master": k.master, "alias_of": k.alias_of,
                "created_at": at(k.created_at), "revoked_at": k.revoked_at.map(at),
            })
        })
        .collect();
    let q = c.engine.workspace_quota(&ws)?;
    let quota = json!({
        "max_sandboxes": q.max_sandboxes, "max_vcpu": q.max_vcpu,
        "max_memory_mb": q.max_memory_mb,
    });
    Ok(Json(json!({"workspace": ws, "keys": keys, "quota": quota})))
}
