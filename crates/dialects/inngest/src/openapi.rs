//! The dialect's OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]`
//! annotations and the request and view types (`sandboxd openapi` prints it).

use crate::error::ErrorItem;
use crate::render::{Metadata, PageView};
use crate::routes;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// `{data, metadata}`: every single-resource answer.
#[derive(ToSchema)]
pub struct Data<T> {
    pub data: T,
    pub metadata: Metadata,
}

/// `{data: […], metadata, page}`: every list answer (keyset pages, opaque cursors).
#[derive(ToSchema)]
pub struct List<T> {
    pub data: Vec<T>,
    pub metadata: Metadata,
    pub page: PageView,
}

/// `{errors: [{code, message}]}`: every error answer (exactly one item).
#[derive(ToSchema)]
pub struct Errors {
    pub errors: Vec<ErrorItem>,
}

/// One NDJSON line of a log or output stream: `{"type":"log", stream, data, encoding,
/// at}`, or a terminal `{"type":"error", errors:[…], error:{…}}` (`errors` is the
/// documented shape, `error` the one the inngest SDK reads; both are sent).
#[derive(ToSchema)]
#[schema(as = StreamFrame)]
pub struct StreamFrameDoc {
    /// `log` or `error`.
    #[schema(rename = "type")]
    pub kind: String,
    /// `STDOUT` or `STDERR` (log frames).
    pub stream: Option<String>,
    /// Base64 bytes (log frames).
    pub data: Option<String>,
    /// `base64` (log frames).
    pub encoding: Option<String>,
    /// RFC 3339 time of the chunk (log frames).
    pub at: Option<String>,
    /// The failure (error frames).
    pub errors: Option<Vec<ErrorItem>>,
    /// The same failure (error frames).
    pub error: Option<ErrorItem>,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "sandboxd: Inngest Sandbox REST API v2",
        description = "The Inngest Sandbox REST v2 dialect of sandboxd. Authenticate with \
`Authorization: Bearer <key>`. A workspace-scoped key selects its workspace (the master key \
is scoped to `default`); an account-scoped key must also send `X-Inngest-Env: <environment>` \
(missing or unknown: 400 `invalid_request`). Every answer carries `Cache-Control: no-store`; \
JSON bodies must be `application/json`, one value, no unknown fields, at most 1 MiB. Routes \
tagged `sandboxd extensions` are not on the REST page: they are what the inngest SDK calls \
(pause, resume, snapshots), served with the shapes its client validates."
    ),
    paths(
        routes::sandboxes::create,
        routes::sandboxes::list,
        routes::sandboxes::get,
        routes::sandboxes::destroy,
        routes::exec::exec,
        routes::output::logs,
        routes::files::upload,
        routes::files::download,
        routes::processes::start,
        routes::processes::list,
        routes::processes::get,
        routes::processes::signal,
        routes::processes::wait,
        routes::output::retained,
        routes::output::stream,
        routes::lifecycle::pause,
        routes::lifecycle::resume,
        routes::snapshots::create,
        routes::snapshots::list,
        routes::snapshots::get,
        routes::snapshots::delete,
        routes::usage::usage,
    ),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
struct ApiDoc;

/// Declares the bearer-key security scheme the document refers to.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "An API key (from SANDBOXD_MASTER_KEY or `sandboxd keys create`)",
            ))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The document as pretty-printed JSON, newline-terminated.
pub fn document() -> String {
    let mut json = ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    json.push('\n');
    json
}

#[cfg(test)]
mod tests {
    /// The committed reference must be what the code generates: regenerate it with
    /// `sandboxd openapi > docs/openapi/inngest.json`.
    #[test]
    fn committed_document_is_current() {
        let committed = include_str!("../../../../docs/openapi/inngest.json");
        sandboxd_dialect_common::openapi::assert_current("inngest", committed, &super::document());
    }

    #[test]
    fn documents_every_route() {
        let doc: serde_json::Value = serde_json::from_str(&super::document()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().unwrap();
        let operations: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
        assert_eq!(operations, 22);
        assert!(paths.contains_key("/v2/sandboxes/{sandbox_id}/pause"));
    }
}
