//! The dialect's OpenAPI 3.1 document (`sandboxd openapi --dialect runzivo`): the
//! request and view types' schemas with the bounds the handlers enforce, every route, and
//! every status each route can answer, in the `{"error":{"code","message"}}` shape.

use crate::exec_request::ExecBody;
use crate::routes::sandboxes::{CreateBody, ListView};
use crate::views::SandboxView;
use sandboxd_dialect_common::openapi::{document_json, Errors};
use std::borrow::Cow;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{OpenApi, PartialSchema, ToSchema};

/// A sandbox's status.
#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum Status {
    Pending,
    Starting,
    Running,
    Pausing,
    Paused,
    Resuming,
    Stopping,
    Stopped,
    Expired,
    Deleted,
    Failed,
}

/// The exec body's `env`: at most 64 variables, names `^[A-Za-z_][A-Za-z0-9_]{0,127}$`,
/// values at most 8192 bytes without NUL.
pub struct Env;

impl PartialSchema for Env {
    fn schema() -> RefOr<Schema> {
        let value = ObjectBuilder::new()
            .schema_type(Type::String)
            .max_length(Some(8192));
        let name = ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some("^[A-Za-z_][A-Za-z0-9_]{0,127}$"));
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "Up to 64 variables added to the sandbox's environment; values at most \
                 8192 bytes without NUL",
            ))
            .max_properties(Some(64))
            .property_names(Some(name))
            .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(
                value.build().into(),
            ))))
            .into()
    }
}

impl ToSchema for Env {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Env")
    }
}

/// One line of the exec stream.
#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum LineType {
    Stdout,
    Stderr,
    Exit,
}

/// Why a command ended with its sandbox: deleted, expired, or stopped (or paused).
#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum EndReason {
    Deleted,
    Expired,
    Stopped,
}

/// One NDJSON line of `…/exec`: `{"type":"stdout"|"stderr","data":base64}` chunks, then
/// exactly one `{"type":"exit","exit_code","timed_out","truncated","reason"?}`.
#[derive(ToSchema)]
#[schema(as = ExecLine)]
#[allow(dead_code)]
pub struct ExecLine {
    #[schema(rename = "type")]
    kind: LineType,
    /// Output lines: the bytes, base64.
    #[schema(content_encoding = "base64")]
    data: Option<String>,
    /// The exit line: the command's code, 128+N after signal N, 124 when it timed out,
    /// 137 when the output passed 8 MiB or the sandbox ended under it.
    exit_code: Option<i32>,
    timed_out: Option<bool>,
    truncated: Option<bool>,
    /// The exit line, when the sandbox ended (or was paused) under the command.
    reason: Option<EndReason>,
}

/// `POST …/terminal/tickets`: a single-use ticket for `GET …/terminal`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Ticket {
    ticket: String,
    /// Seconds the ticket stays valid (60).
    expires_in: u64,
}

/// `{"error":{"code","message"}}`: every error answer.
#[derive(ToSchema)]
#[schema(as = Error)]
#[allow(dead_code)]
pub struct ErrorDoc {
    error: ErrorItem,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ErrorItem {
    /// A stable code (see each status).
    code: String,
    /// A human-readable message.
    message: String,
}

#[allow(dead_code)]
mod paths {
    use super::*;

    #[utoipa::path(post, path = "/v1/customer/tenants/{tenantId}/sandboxes", operation_id = "createSandbox", tag = "sandboxes",
        summary = "Create a sandbox (the body is optional)",
        request_body(content = CreateBody, content_type = "application/json", description = "Optional: an empty body takes every default"),
        params(("tenantId" = String, Path, description = "Your workspace's tenant ID")),
        responses((status = 201, description = "The sandbox", body = SandboxView)))]
    fn create() {}

    #[utoipa::path(get, path = "/v1/customer/tenants/{tenantId}/sandboxes", operation_id = "listSandboxes", tag = "sandboxes",
        summary = "List the tenant's sandboxes, newest first",
        params(
            ("tenantId" = String, Path, description = "Your workspace's tenant ID"),
            ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Page size (default 50)"),
            ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ),
        responses((status = 200, description = "A page", body = ListView)))]
    fn list() {}

    #[utoipa::path(get, path = "/v1/customer/tenants/{tenantId}/sandboxes/{sandboxId}", operation_id = "getSandbox", tag = "sandboxes",
        summary = "Get a sandbox",
        params(
            ("tenantId" = String, Path, description = "Your workspace's tenant ID"),
            ("sandboxId" = String, Path, pattern = "^sbx_[0-9a-f]{24}$", description = "sbx_ followed by 24 lowercase hexadecimal characters (anything else: 400)"),
        ),
        responses((status = 200, description = "The sandbox", body = SandboxView)))]
    fn get() {}

    #[utoipa::path(delete, path = "/v1/customer/tenants/{tenantId}/sandboxes/{sandboxId}", operation_id = "deleteSandbox", tag = "sandboxes",
        summary = "Delete a sandbox (status `deleted`; it stays readable)",
        params(
            ("tenantId" = String, Path, description = "Your workspace's tenant ID"),
            ("sandboxId" = String, Path, pattern = "^sbx_[0-9a-f]{24}$", description = "sbx_ followed by 24 lowercase hexadecimal characters (anything else: 400)"),
        ),
        responses((status = 200, description = "The sandbox", body = SandboxView)))]
    fn delete() {}

    #[utoipa::path(post, path = "/v1/customer/tenants/{tenantId}/sandboxes/{sandboxId}/exec", operation_id = "execInSandbox", tag = "sandboxes",
        summary = "Run `bash -lc cmd` and stream stdout, stderr and the exit as NDJSON",
        description = "Body limit 128 KiB. Up to four concurrent commands per sandbox. Disconnecting cancels the command. Output is capped at 8 MiB (then exit code 137, truncated). A timed-out command is sent SIGTERM, then SIGKILL after the kill grace, and ends with code 124.",
        request_body = ExecBody,
        params(
            ("tenantId" = String, Path, description = "Your workspace's tenant ID"),
            ("sandboxId" = String, Path, pattern = "^sbx_[0-9a-f]{24}$", description = "sbx_ followed by 24 lowercase hexadecimal characters (anything else: 400)"),
        ),
        responses((status = 200, description = "Stream opened: one ExecLine per line", body = ExecLine, content_type = "application/x-ndjson")))]
    fn exec() {}

    #[utoipa::path(post, path = "/v1/customer/tenants/{tenantId}/sandboxes/{sandboxId}/terminal/tickets", operation_id = "createTerminalTicket", tag = "terminal",
        summary = "Buy a single-use terminal ticket, valid 60 seconds",
        params(
            ("tenantId" = String, Path, description = "Your workspace's tenant ID"),
            ("sandboxId" = String, Path, pattern = "^sbx_[0-9a-f]{24}$", description = "sbx_ followed by 24 lowercase hexadecimal characters (anything else: 400)"),
        ),
        responses((status = 201, description = "The ticket", body = Ticket)))]
    fn ticket() {}

    #[utoipa::path(get, path = "/v1/customer/tenants/{tenantId}/sandboxes/{sandboxId}/terminal", operation_id = "openTerminal", tag = "terminal",
        summary = "A WebSocket on a login shell's PTY (authenticated by the ticket, not a key)",
        description = "PTY output arrives as binary messages; binary (or non-control text) messages are keystrokes; `{\"type\":\"resize\",\"cols\":C,\"rows\":R}` resizes. When the shell exits the server sends `{\"type\":\"exit\",\"exit_code\":N}` and closes with 1000.",
        params(
            ("tenantId" = String, Path, description = "Your workspace's tenant ID"),
            ("sandboxId" = String, Path, pattern = "^sbx_[0-9a-f]{24}$", description = "sbx_ followed by 24 lowercase hexadecimal characters"),
            ("ticket" = Option<String>, Query, description = "The ticket (missing: 401 unauthorized; expired, used or forged: 401 ticket_invalid)"),
            ("cols" = Option<u16>, Query, minimum = 1, maximum = 65535, description = "Columns (default 80)"),
            ("rows" = Option<u16>, Query, minimum = 1, maximum = 65535, description = "Rows (default 24)"),
        ),
        security(()),
        responses((status = 101, description = "Switching to the WebSocket protocol")))]
    fn terminal() {}

    #[utoipa::path(get, path = "/v1/customer/tenants/{tenantId}/sandboxes/{sandboxId}/metrics", operation_id = "getSandboxMetrics", tag = "sandboxd extensions",
        summary = "Live resource usage of a running or paused sandbox: CPU seconds and percent over the last interval, memory current and peak, tasks, writable-layer disk use and limit, network bytes",
        params(
            ("tenantId" = String, Path, description = "Your workspace's tenant ID"),
            ("sandboxId" = String, Path, pattern = "^sbx_[0-9a-f]{24}$", description = "sbx_ followed by 24 lowercase hexadecimal characters (anything else: 400)"),
        ),
        responses((status = 200, description = "Its usage now", body = crate::routes::usage::UsageView)))]
    fn usage() {}
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "sandboxd: Runzivo agent sandboxes v1",
        description = "The Runzivo agent sandboxes v1 dialect of sandboxd. Authenticate with \
`Authorization: Bearer <key>`; the key must be a member of the path's tenant (an unknown tenant \
answers 403 tenant_membership_required, like a foreign one) and hold `sandboxes:read` (get, list) \
or `sandboxes:write` (the rest). Checks run in this order: 401, 403 membership, 403 permission, \
400 path and body, then 404 and 409. Every answer carries `Cache-Control: no-store`; JSON bodies \
must be `application/json`, one value, no unknown fields, at most 128 KiB, and every body problem \
is 400 invalid_request. Every error is `{\"error\":{\"code\",\"message\"}}`; 503 and 429 answers \
carry `Retry-After`."
    ),
    paths(
        paths::create,
        paths::list,
        paths::get,
        paths::delete,
        paths::exec,
        paths::ticket,
        paths::terminal,
        paths::usage,
    ),
    components(schemas(ErrorDoc, ErrorItem, Status, Env, LineType, EndReason)),
    security(("bearer" = []))
)]
struct ApiDoc;

const SANDBOX: &[(u16, &str)] = &[
    (400, "invalid_request: a malformed sandboxId"),
    (404, "sandbox_not_found"),
];

/// The statuses each operation can answer besides its success, with their codes.
const ERRORS: Errors = &[
    ("createSandbox", &[(400, "invalid_request: malformed JSON, unknown fields or invalid values (or resources the server can never hold)"), (429, "quota_exceeded or rate_limited"), (503, "sandboxes_unavailable: no capacity now, or the backend failed")]),
    ("listSandboxes", &[(400, "invalid_request")]),
    ("getSandbox", SANDBOX),
    ("deleteSandbox", &[(400, "invalid_request: a malformed sandboxId"), (404, "sandbox_not_found"), (409, "sandbox_wrong_state")]),
    ("execInSandbox", &[(400, "invalid_request: a malformed sandboxId or body"), (404, "sandbox_not_found"), (409, "sandbox_wrong_state (not running) or session_limit_reached (four commands run)"), (503, "sandbox_exec_unavailable")]),
    ("createTerminalTicket", SANDBOX),
    ("getSandboxMetrics", &[(400, "invalid_request: a malformed sandboxId"), (404, "sandbox_not_found"), (409, "sandbox_wrong_state (neither running nor paused)")]),
    ("openTerminal", &[(400, "invalid_request: a malformed query, sandboxId or WebSocket handshake"), (401, "unauthorized (no ticket) or ticket_invalid"), (404, "sandbox_not_found"), (409, "sandbox_wrong_state"), (503, "sandbox_exec_unavailable")]),
];

/// Every operation can also answer these.
const COMMON: &[(u16, &str)] = &[
    (401, "unauthorized: missing or invalid bearer token"),
    (403, "tenant_membership_required, permission_required or api_key_scope_required"),
    (500, "internal_error"),
    (503, "sandboxes_unavailable: the service is unavailable, or the server is at its connection limit"),
];

/// The document as pretty-printed JSON, newline-terminated.
pub fn document() -> String {
    let mut api = ApiDoc::openapi();
    // The create body may be left out entirely (utoipa marks every body required).
    let create = api
        .paths
        .paths
        .get_mut("/v1/customer/tenants/{tenantId}/sandboxes")
        .and_then(|item| item.post.as_mut())
        .and_then(|op| op.request_body.as_mut());
    if let Some(body) = create {
        body.required = Some(utoipa::openapi::Required::False);
    }
    document_json(api, "Error", ERRORS, COMMON)
}

#[cfg(test)]
mod tests {
    use utoipa::OpenApi;

    /// The committed reference must be what the code generates: regenerate it with
    /// `sandboxd openapi --dialect runzivo > docs/openapi/runzivo.json`.
    #[test]
    fn committed_document_is_current() {
        let committed = include_str!("../../../../docs/openapi/runzivo.json");
        sandboxd_dialect_common::openapi::assert_current("runzivo", committed, &super::document());
    }

    #[test]
    fn documents_every_route_and_its_errors() {
        let unlisted =
            sandboxd_dialect_common::openapi::unlisted(&super::ApiDoc::openapi(), super::ERRORS);
        assert!(unlisted.is_empty(), "{unlisted:?}");
        let doc: serde_json::Value = serde_json::from_str(&super::document()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        let operations: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
        assert_eq!(operations, 8);
        let exec = &doc["components"]["schemas"]["ExecRequest"]["properties"];
        assert_eq!(exec["timeout_seconds"]["maximum"], 3600);
        assert_eq!(exec["cmd"]["maxLength"], 65536);
    }
}
