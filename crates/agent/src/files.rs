//! Streaming file download and atomic, streamed upload (temp file in the same directory,
//! `fchmod`, `rename`). Only regular files; a symlink at the final component is refused.

use crate::error::{check_no_nul, error, file_io, invalid, not_regular};
use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use sandboxd_agent_protocol::{AgentError, AgentErrorCode, FileMeta, FileWritten};
use std::fs::{OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;
use tokio_util::io::ReaderStream;

const READ_CHUNK: usize = 64 * 1024;

fn check_path(path: &str) -> Result<&Path, AgentError> {
    check_no_nul("path", path)?;
    if !path.starts_with('/') {
        return Err(invalid("path must be absolute"));
    }
    if path.trim_end_matches('/').is_empty() || path.ends_with('/') {
        return Err(not_regular(path));
    }
    Ok(Path::new(path))
}

/// Opens a regular file for streaming; never follows a symlink at the last component.
pub(crate) fn open(
    path: &str,
) -> Result<
    (
        FileMeta,
        impl futures_util::Stream<Item = io::Result<Bytes>>,
    ),
    AgentError,
> {
    let p = check_path(path)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p)
        .map_err(|e| file_io(path, &e))?;
    let meta = file.metadata().map_err(|e| file_io(path, &e))?;
    if !meta.file_type().is_file() {
        return Err(not_regular(path));
    }
    let info = FileMeta {
        size: meta.len(),
        mode: meta.mode() & 0o7777,
        mtime: meta.mtime(),
    };
    let stream = ReaderStream::with_capacity(tokio::fs::File::from_std(file), READ_CHUNK);
    Ok((info, stream))
}

/// Parses the octal `mode` query value (default 0644).
pub(crate) fn parse_mode(mode: Option<&str>) -> Result<u32, AgentError> {
    let Some(m) = mode else { return Ok(0o644) };
    match u32::from_str_radix(m, 8) {
        Ok(v) if v <= 0o7777 => Ok(v),
        _ => Err(invalid(format!(
            "bad file mode {m:?} (octal, at most 7777)"
        ))),
    }
}

/// Streams `body` into a temp file beside `path`, then renames it into place. A refused
/// upload is read to its end before the answer: a client still sending it would otherwise
/// meet a closed connection instead of the refusal.
pub(crate) async fn write(
    path: &str,
    mode: u32,
    body: Incoming,
) -> Result<FileWritten, AgentError> {
    match target(path) {
        Ok((p, parent, name)) => write_to(path, p, parent, name, mode, body).await,
        Err(e) => {
            discard(body).await;
            Err(e)
        }
    }
}

/// Reads a body to its end (or its first error), keeping nothing.
async fn discard(mut body: Incoming) {
    while let Some(Ok(_)) = body.frame().await {}
}

/// The upload's target, its directory and file name, checked before any byte is read.
fn target(path: &str) -> Result<(&Path, &Path, &std::ffi::OsStr), AgentError> {
    let p = check_path(path)?;
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Err(not_regular(path));
    };
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(error(
                AgentErrorCode::FileNotFound,
                format!("{} is not a directory", parent.display()),
            ))
        }
        Err(e) => return Err(file_io(&parent.display().to_string(), &e)),
    }
    match std::fs::symlink_metadata(p) {
        Ok(m) if !m.file_type().is_file() => return Err(not_regular(path)),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(file_io(path, &e)),
    }
    Ok((p, parent, name))
}

async fn write_to(
    path: &str,
    p: &Path,
    parent: &Path,
    name: &std::ffi::OsStr,
    mode: u32,
    body: Incoming,
) -> Result<FileWritten, AgentError> {
    let tmp: PathBuf = parent.join(format!(
        ".{}.agent-tmp-{}",
        name.to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    ));
    let result = fill(&tmp, mode, body).await;
    let result = match result {
        Ok(n) => tokio::fs::rename(&tmp, p).await.map(|()| n),
        Err(e) => Err(e),
    };
    match result {
        Ok(bytes_written) => Ok(FileWritten {
            path: path.to_owned(),
            bytes_written,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(file_io(path, &e))
        }
    }
}

async fn fill(tmp: &Path, mode: u32, body: Incoming) -> io::Result<u64> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(tmp)?;
    let mut file = tokio::fs::File::from_std(file);
    let mut stream = body.into_data_stream().map_err(io::Error::other);
    let mut written = 0u64;
    while let Some(data) = stream.try_next().await? {
        file.write_all(&data).await?;
        written += data.len() as u64;
    }
    file.flush().await?;
    let file = file.into_std().await;
    // fchmod: exact bits, unaffected by the umask.
    file.set_permissions(Permissions::from_mode(mode))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_paths_are_validated() {
        assert_eq!(parse_mode(None).unwrap(), 0o644);
        assert_eq!(parse_mode(Some("4755")).unwrap(), 0o4755);
        assert!(parse_mode(Some("10000")).is_err());
        assert!(parse_mode(Some("9")).is_err());
        assert!(check_path("relative").is_err());
        assert_eq!(
            check_path("/").err().map(|e| e.code),
            Some(AgentErrorCode::NotARegularFile)
        );
        assert!(check_path("/a\0b").is_err());
        assert!(check_path("/tmp/x").is_ok());
    }
}
