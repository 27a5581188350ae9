//! The file browser: a directory's entries (by `ls` in the sandbox), download and
//! upload of one file, streamed through the engine's file operations.

use super::{reader, sandbox_id, writer};
use crate::error::ApiError;
use crate::session::Session;
use crate::Console;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::StreamExt;
use sandboxd_engine::{ExecCommand, ProcessExit};
use serde::Deserialize;
use serde_json::{json, Value};

/// Largest upload through the console.
const UPLOAD_MAX: u64 = 1 << 30;
/// Largest directory listing read.
const LISTING_MAX: u64 = 4 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathQuery {
    path: String,
}

fn absolute(path: &str) -> Result<&str, ApiError> {
    match path.starts_with('/') && !path.contains('\0') {
        true => Ok(path),
        false => Err(ApiError::invalid("path must be absolute")),
    }
}

/// `[{name, dir}]` of the directory, dot-files included, sorted directories first.
pub async fn list(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    axum::extract::Path(id): axum::extract::Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    let ws = reader(&s)?.to_owned();
    let dir = absolute(&q.path)?;
    let cmd = ExecCommand {
        argv: ["/bin/ls", "-1Ap", "--", dir].map(String::from).to_vec(),
        env: None,
        cwd: None,
        timeout: std::time::Duration::from_secs(10),
        max_output_bytes: LISTING_MAX,
    };
    let out = c.engine.exec(&ws, sandbox_id(&id)?, cmd).await?;
    if out.exit != Some(ProcessExit::Code(0)) {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Err(ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            "file_not_found",
            why,
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut entries: Vec<(bool, String)> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| match l.strip_suffix('/') {
            Some(d) => (true, d.to_owned()),
            None => (false, l.to_owned()),
        })
        .collect();
    entries.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let entries: Vec<Value> = entries
        .into_iter()
        .map(|(dir, name)| json!({"name": name, "dir": dir}))
        .collect();
    Ok(Json(json!({"path": dir, "entries": entries})))
}

pub async fn download(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    axum::extract::Path(id): axum::extract::Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ApiError> {
    let ws = reader(&s)?.to_owned();
    let path = absolute(&q.path)?;
    let (meta, body) = c.engine.read_file(&ws, sandbox_id(&id)?, path).await?;
    let base: String = path
        .rsplit('/')
        .next()
        .unwrap_or("file")
        .chars()
        .filter(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\\' | ';'))
        .collect();
    let disposition = format!("attachment; filename=\"{base}\"");
    Ok((
        [
            (CONTENT_TYPE, "application/octet-stream".to_owned()),
            (CONTENT_LENGTH, meta.size.to_string()),
            (CONTENT_DISPOSITION, disposition),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

pub async fn upload(
    State(c): State<Console>,
    Extension(s): Extension<Session>,
    axum::extract::Path(id): axum::extract::Path<String>,
    Query(q): Query<PathQuery>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let ws = writer(&s)?.to_owned();
    let path = absolute(&q.path)?.to_owned();
    let stream = body
        .into_data_stream()
        .map(|r| r.map_err(sandboxd_dialect_common::body_io_error))
        .boxed();
    let written = c
        .engine
        .write_file(&ws, sandbox_id(&id)?, &path, 0o644, stream, UPLOAD_MAX)
        .await?;
    Ok(Json(json!({"path": path, "size": written.bytes_written})))
}
