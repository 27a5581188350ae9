//! The dialect's OpenAPI 3.1 document (`sandboxd openapi --dialect openrelay`): the
//! request and view types' schemas with the bounds the handlers enforce, every route, and
//! every status each route can answer, with the error shape.

use crate::body::{CreateBody, Placement, RunSpec};
use crate::error::ErrorBody;
use crate::routes::{sandboxes::ListView, templates::BuildBody, templates::ListView as Templates};
use crate::views::{ResultView, SandboxView, TemplateView};
use sandboxd_dialect_common::openapi::{document_json, Errors};
use utoipa::{OpenApi, ToSchema};

/// `running`, `paused` (its owner paused it; the timeout counts on) or `exited`.
#[derive(ToSchema)]
#[schema(as = State)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum State {
    Running,
    Paused,
    Exited,
}

/// Why a sandbox ended: deleted (`killed`), its timeout passed, its agent died
/// (`guest_exit`), or it could not start (`error`).
#[derive(ToSchema)]
#[schema(as = ExitReason)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ExitReason {
    Killed,
    Timeout,
    GuestExit,
    Error,
}

/// `egress` (default) or `none` (loopback only, no rules).
#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum NetworkMode {
    Egress,
    None,
}

/// A rule: an IPv4 CIDR (a bare address is a /32) or a domain name.
#[derive(ToSchema)]
#[schema(as = Rule, value_type = String, example = "198.51.100.0/24")]
#[allow(dead_code)]
pub struct Rule(String);

/// The sandbox's network policy layer, under its workspace's.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct Network {
    mode: Option<NetworkMode>,
    /// Destinations allowed (empty: whatever the other layers allow).
    allow: Option<Vec<Rule>>,
    /// Destinations refused; deny always wins.
    deny: Option<Vec<Rule>>,
}

/// `network` with mode `egress`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct Egress {
    allow: Option<Vec<Rule>>,
    deny: Option<Vec<Rule>>,
}

/// `sandbox` (always first), `started`, `stdout`, `stderr`, `exit` (always last when a
/// command ran).
#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum EventType {
    Sandbox,
    Started,
    Stdout,
    Stderr,
    Exit,
}

/// One line of an `application/x-ndjson` answer (a SandboxEvent).
#[derive(ToSchema)]
#[schema(as = SandboxEvent)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct SandboxEvent {
    /// 0, 1, 2, … with no gaps.
    seq: u64,
    #[schema(rename = "type")]
    kind: EventType,
    /// `sandbox` events.
    sandbox: Option<SandboxView>,
    /// `started` and `exit` events.
    exec_id: Option<String>,
    /// `stdout` and `stderr` events: UTF-8 text.
    data: Option<String>,
    /// `exit` events.
    exit_code: Option<i32>,
    /// `exit` events.
    truncated: Option<bool>,
    /// `exit` events.
    error: Option<ErrorBody>,
}

const SANDBOX_ID: &str = "The sandbox's id (a UUID; anything else is 404)";

/// The routes, documented where they are declared in `router` (the handlers take the
/// raw request so that they can answer every failure in the dialect's shape).
#[allow(dead_code)]
mod paths {
    use super::*;

    #[utoipa::path(post, path = "/v1/sandboxes", operation_id = "createSandbox", tag = "sandboxes",
        summary = "Create a sandbox, optionally running a first command",
        description = "With `run`, `Accept: application/json` (or none) waits for the command and answers the sandbox with its `result`; `Accept: application/x-ndjson` streams SandboxEvents. A refusal keeps nothing.",
        request_body = CreateBody,
        params(
            ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 512, description = "1 to 512 bytes: a repeat with the same body answers the kept answer with `Idempotent-Replayed: true`"),
            ("X-Resume-From" = Option<u64>, Header, minimum = 0, description = "On a replayed stream, the seq of the last line already read"),
        ),
        responses((status = 201, description = "The sandbox (with `result` when `run` was set), or its SandboxEvents",
            content((SandboxView = "application/json"), (SandboxEvent = "application/x-ndjson")))))]
    fn create() {}

    #[utoipa::path(get, path = "/v1/sandboxes", operation_id = "listSandboxes", tag = "sandboxes",
        summary = "List active sandboxes (newest first) or, with state=exited, history of the last 24 hours",
        params(
            ("state" = Option<String>, Query, pattern = "^(active|exited)$", description = "`active` (default: running and paused) or `exited`"),
            ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Page size (default 50)"),
            ("cursor" = Option<String>, Query, description = "`nextCursor` of the previous page"),
        ),
        responses((status = 200, description = "A page", body = ListView)))]
    fn list() {}

    #[utoipa::path(get, path = "/v1/sandboxes/{sandbox_id}", operation_id = "getSandbox", tag = "sandboxes",
        summary = "Get a live sandbox, or one that ended in the last 24 hours (not ephemeral)",
        params(("sandbox_id" = String, Path, description = SANDBOX_ID)),
        responses((status = 200, description = "The sandbox", body = SandboxView)))]
    fn get() {}

    #[utoipa::path(delete, path = "/v1/sandboxes/{sandbox_id}", operation_id = "deleteSandbox", tag = "sandboxes",
        summary = "End a sandbox (exitReason `killed`); an ended one is answered as it is",
        params(("sandbox_id" = String, Path, description = SANDBOX_ID)),
        responses((status = 200, description = "The sandbox, exited", body = SandboxView)))]
    fn delete() {}

    #[utoipa::path(post, path = "/v1/sandboxes/{sandbox_id}/pause", operation_id = "pauseSandbox", tag = "sandboxes",
        summary = "Freeze a running sandbox (its timeout counts on)",
        params(("sandbox_id" = String, Path, description = SANDBOX_ID)),
        responses((status = 200, description = "The sandbox, paused", body = SandboxView)))]
    fn pause() {}

    #[utoipa::path(post, path = "/v1/sandboxes/{sandbox_id}/resume", operation_id = "resumeSandbox", tag = "sandboxes",
        summary = "Thaw a paused sandbox",
        params(("sandbox_id" = String, Path, description = SANDBOX_ID)),
        responses((status = 200, description = "The sandbox, running", body = SandboxView)))]
    fn resume() {}

    #[utoipa::path(post, path = "/v1/sandboxes/{sandbox_id}/exec", operation_id = "execInSandbox", tag = "sandboxes",
        summary = "Run a command in a running sandbox: its result as JSON, or SandboxEvents as NDJSON",
        request_body = RunSpec,
        params(("sandbox_id" = String, Path, description = SANDBOX_ID)),
        responses((status = 200, description = "The command's result, or its SandboxEvents",
            content((ResultView = "application/json"), (SandboxEvent = "application/x-ndjson")))))]
    fn exec() {}

    #[utoipa::path(get, path = "/v1/sandboxes/{sandbox_id}/metrics", operation_id = "getSandboxMetrics", tag = "sandboxd extensions",
        summary = "Live resource usage of a running or paused sandbox: CPU seconds and percent over the last interval, memory current and peak, tasks, writable-layer disk use and limit, network bytes",
        params(("sandbox_id" = String, Path, description = SANDBOX_ID)),
        responses((status = 200, description = "Its usage now", body = sandboxd_dialect_common::usage::UsageView)))]
    fn usage() {}

    #[utoipa::path(get, path = "/v1/sandbox-templates", operation_id = "listTemplates", tag = "templates",
        summary = "The built-in templates and the workspace's own",
        responses((status = 200, description = "Every template", body = Templates)))]
    fn list_templates() {}

    #[utoipa::path(post, path = "/v1/sandbox-templates", operation_id = "buildTemplate", tag = "templates",
        summary = "Build a workspace template: run the steps in a sandbox of `from`, snapshot its filesystem",
        request_body = BuildBody,
        responses((status = 201, description = "The template", body = TemplateView)))]
    fn build_template() {}

    #[utoipa::path(delete, path = "/v1/sandbox-templates/{template_id}", operation_id = "deleteTemplate", tag = "templates",
        summary = "Delete a workspace template (built-ins cannot be deleted: 409)",
        params(("template_id" = String, Path, description = "The template's id")),
        responses((status = 200, description = "The deleted template", body = TemplateView)))]
    fn delete_template() {}
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "sandboxd: OpenRelay sandboxes v1",
        description = "The OpenRelay sandboxes v1 dialect of sandboxd. Authenticate with \
`Authorization: Bearer <key>`; a workspace-scoped key acts in its workspace, an account-scoped \
key in the default one. Every answer carries `Cache-Control: no-store`; JSON bodies must be \
`application/json`, one value, no unknown fields, at most 1 MiB. Every error is \
`{error, code, permission?, requestId}`; 503 and 429 answers carry `Retry-After`."
    ),
    paths(
        paths::create,
        paths::list,
        paths::get,
        paths::delete,
        paths::pause,
        paths::resume,
        paths::exec,
        paths::usage,
        paths::list_templates,
        paths::build_template,
        paths::delete_template,
    ),
    components(schemas(ErrorBody, Placement, State, ExitReason, Network, Egress, Rule, EventType)),
    security(("bearer" = []))
)]
struct ApiDoc;

/// The statuses each operation can answer besides its success, with their codes.
const ERRORS: Errors = &[
    ("createSandbox", &[(400, "INVALID_REQUEST, RESOURCES_EXCEED_TEMPLATE, TEMPLATE_NOT_FOUND or INVALID_IDEMPOTENCY_KEY"), (409, "IDEMPOTENCY_KEY_IN_USE or IDEMPOTENT_ANSWER_NOT_KEPT"), (413, "TOO_LARGE"), (415, "UNSUPPORTED_MEDIA_TYPE"), (422, "IDEMPOTENCY_KEY_REUSED"), (429, "QUOTA_EXCEEDED or RATE_LIMITED"), (503, "CAPACITY_EXHAUSTED (no capacity within waitSeconds) or UNAVAILABLE")]),
    ("listSandboxes", &[(400, "INVALID_REQUEST")]),
    ("getSandbox", &[(404, "NOT_FOUND")]),
    ("deleteSandbox", &[(404, "NOT_FOUND")]),
    ("pauseSandbox", &[(404, "NOT_FOUND"), (409, "INVALID_STATE")]),
    ("resumeSandbox", &[(404, "NOT_FOUND"), (409, "INVALID_STATE")]),
    ("execInSandbox", &[(400, "INVALID_REQUEST"), (404, "NOT_FOUND"), (409, "INVALID_STATE (not running)"), (413, "TOO_LARGE"), (415, "UNSUPPORTED_MEDIA_TYPE")]),
    ("getSandboxMetrics", &[(404, "NOT_FOUND"), (409, "INVALID_STATE (neither running nor paused)")]),
    ("listTemplates", &[]),
    ("buildTemplate", &[(400, "INVALID_REQUEST (a failing step carries its exit code and stderr tail) or TEMPLATE_NOT_FOUND"), (409, "ALREADY_EXISTS"), (413, "TOO_LARGE"), (415, "UNSUPPORTED_MEDIA_TYPE"), (429, "QUOTA_EXCEEDED or RATE_LIMITED"), (503, "CAPACITY_EXHAUSTED or UNAVAILABLE")]),
    ("deleteTemplate", &[(404, "NOT_FOUND"), (409, "INVALID_STATE (a built-in)")]),
];

/// Every operation can also answer these.
const COMMON: &[(u16, &str)] = &[
    (401, "UNAUTHENTICATED: no, malformed or unknown key"),
    (
        403,
        "PERMISSION_DENIED: the key lacks the route's permission (named in `permission`)",
    ),
    (500, "INTERNAL"),
    (
        503,
        "UNAVAILABLE: the backend failed, or the server is at its connection limit",
    ),
];

/// The document as pretty-printed JSON, newline-terminated.
pub fn document() -> String {
    document_json(ApiDoc::openapi(), "Error", ERRORS, COMMON)
}

#[cfg(test)]
mod tests {
    /// The committed reference must be what the code generates: regenerate it with
    /// `sandboxd openapi --dialect openrelay > docs/openapi/openrelay.json`.
    #[test]
    fn committed_document_is_current() {
        let committed = include_str!("../../../../docs/openapi/openrelay.json");
        sandboxd_dialect_common::openapi::assert_current(
            "openrelay",
            committed,
            &super::document(),
        );
    }

    #[test]
    fn documents_every_route_and_its_errors() {
        use utoipa::OpenApi;
        let unlisted =
            sandboxd_dialect_common::openapi::unlisted(&super::ApiDoc::openapi(), super::ERRORS);
        assert!(unlisted.is_empty(), "{unlisted:?}");
        let doc: serde_json::Value = serde_json::from_str(&super::document()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        let operations: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
        assert_eq!(operations, 11);
        let create = &doc["paths"]["/v1/sandboxes"]["post"]["responses"];
        for status in [
            "201", "400", "401", "403", "409", "413", "415", "422", "429", "503",
        ] {
            assert!(create[status].is_object(), "create lacks {status}");
        }
        let limit = &doc["paths"]["/v1/sandboxes"]["get"]["parameters"][1]["schema"];
        assert_eq!(
            (limit["minimum"].as_u64(), limit["maximum"].as_u64()),
            (Some(1), Some(100))
        );
    }
}
