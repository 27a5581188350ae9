//! The success envelope `{data, metadata:{fetchedAt}, page?}` and response helpers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_dialect_common::rfc3339_nanos;
use sandboxd_engine::Page;
use serde::Serialize;
use time::OffsetDateTime;

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// When the answer was made, RFC 3339 with nanoseconds.
    pub fetched_at: String,
}

/// Keyset pagination state as the API reports it.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PageView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    pub has_more: bool,
    pub limit: u32,
}

#[derive(Serialize)]
struct Envelope<T> {
    data: T,
    metadata: Metadata,
    #[serde(skip_serializing_if = "Option::is_none")]
    page: Option<PageView>,
}

fn metadata() -> Metadata {
    Metadata {
        fetched_at: rfc3339_nanos(OffsetDateTime::now_utc()),
    }
}

/// `status` with `{data, metadata}`.
pub fn data<T: Serialize>(status: StatusCode, data: T) -> Response {
    (
        status,
        Json(Envelope {
            data,
            metadata: metadata(),
            page: None,
        }),
    )
        .into_response()
}

/// `200` with `{data:[…], metadata, page}`, each item rendered by `view`.
pub fn list<T, V: Serialize>(page: Page<T>, limit: u32, view: impl Fn(&T) -> V) -> Response {
    let items: Vec<V> = page.items.iter().map(view).collect();
    let page = PageView {
        has_more: page.next_cursor.is_some(),
        cursor: page.next_cursor,
        limit,
    };
    (
        StatusCode::OK,
        Json(Envelope {
            data: items,
            metadata: metadata(),
            page: Some(page),
        }),
    )
        .into_response()
}

/// `204 No Content`.
pub fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}
