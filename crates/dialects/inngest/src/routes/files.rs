//! File upload (streamed, at most 100 MiB) and download with its metadata headers.

use crate::error::ApiError;
use crate::extract::{ApiQuery, SandboxPath, Workspace};
use crate::openapi::{Data, Errors};
use crate::params::{parse_mode, validate_path};
use crate::views::FileWrittenView;
use crate::{render, views, AppState};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::TryStreamExt;
use sandboxd_dialect_common::http_date;
use serde::Deserialize;
use time::OffsetDateTime;

/// Largest file that can be uploaded or downloaded.
pub const MAX_FILE_BYTES: u64 = 100 * 1024 * 1024;

#[derive(Deserialize)]
pub struct FileQuery {
    path: Option<String>,
    mode: Option<String>,
}

impl FileQuery {
    fn path(&self) -> Result<String, ApiError> {
        let path = self
            .path
            .clone()
            .ok_or_else(|| ApiError::invalid_request("path is required"))?;
        validate_path("path", &path)?;
        Ok(path)
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "sandbox_file_too_large",
        "files are capped at 100 MiB",
    )
}

#[utoipa::path(
    put,
    operation_id = "uploadFile",
    path = "/v2/sandboxes/{sandbox_id}/files",
    tag = "files",
    summary = "Upload or replace a file (up to 100 MiB, atomic replacement)",
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)"), ("path" = String, Query, min_length = 1, max_length = 4096, pattern = "^/", description = "Absolute path, at most 4096 bytes, no NUL"), ("mode" = Option<String>, Query, pattern = "^[0-7]{1,4}$", description = "Octal permission bits 0001-0777, e.g. 0640 (default 0644)")),
    responses((status = 200, body = Data<FileWrittenView>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn upload(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
    ApiQuery(query): ApiQuery<FileQuery>,
    request: Request,
) -> Result<Response, ApiError> {
    let path = query.path()?;
    let mode = parse_mode(query.mode.as_deref())?;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok());
    if declared
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > MAX_FILE_BYTES)
    {
        return Err(too_large());
    }
    let data = request
        .into_body()
        .into_data_stream()
        .map_err(sandboxd_dialect_common::body_io_error);
    let written = state
        .engine
        .write_file(&ws, id, &path, mode, Box::pin(data), MAX_FILE_BYTES)
        .await
        .map_err(ApiError::for_file)?;
    Ok(render::data(StatusCode::OK, views::file_written(&written)))
}

#[utoipa::path(
    get,
    operation_id = "downloadFile",
    path = "/v2/sandboxes/{sandbox_id}/files",
    tag = "files",
    summary = "Download a file (Content-Length, X-Sandbox-File-Mode, Last-Modified)",
    params(("sandbox_id" = Uuid, Path, description = "Sandbox ID (canonical lowercase UUID)"), ("path" = String, Query, min_length = 1, max_length = 4096, pattern = "^/", description = "Absolute path, at most 4096 bytes, no NUL")),
    responses((status = 200, description = "The raw file", content_type = "application/octet-stream", body = Vec<u8>), (status = "4XX", description = "Error (see `code`)", body = Errors), (status = "5XX", description = "Error (see `code`)", body = Errors))
)]
pub async fn download(
    State(state): State<AppState>,
    Workspace(ws): Workspace,
    SandboxPath(id): SandboxPath,
    ApiQuery(query): ApiQuery<FileQuery>,
) -> Result<Response, ApiError> {
    let path = query.path()?;
    let (meta, data) = state
        .engine
        .read_file(&ws, id, &path)
        .await
        .map_err(ApiError::for_file)?;
    if meta.size > MAX_FILE_BYTES {
        return Err(too_large());
    }
    let modified =
        OffsetDateTime::from_unix_timestamp(meta.mtime).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let mut response = Body::from_stream(data).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(meta.size));
    headers.insert(header::LAST_MODIFIED, header_value(http_date(modified)));
    headers.insert(
        "x-sandbox-file-mode",
        header_value(format!("{:04o}", meta.mode & 0o7777)),
    );
    Ok(response)
}

fn header_value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).unwrap_or(HeaderValue::from_static(""))
}
