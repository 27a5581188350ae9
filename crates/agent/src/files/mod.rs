//! Streaming file download and atomic, durable, streamed upload (temp file in the same
//! directory, `fchmod`, `fsync`, `rename`, `fsync` of the directory): an upload answers
//! success only once its data and name are on disk, and a full or failing disk is an
//! error, never a success the kernel later loses. Only regular files; a symlink at the
//! final component is refused.

use crate::error::{check_no_nul, error, file_io, invalid, not_regular};
use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use sandboxd_agent_protocol::{AgentError, AgentErrorCode, FileMeta, FileWritten};
use std::fs::{OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

mod at;
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

/// Streams `body` into a temp file beside `path`, syncs it, renames it into place and
/// syncs the directory. A refused upload is read to its end before the answer: a client
/// still sending it would otherwise meet a closed connection instead of the refusal.
pub(crate) async fn write(
    path: &str,
    mode: u32,
    body: Incoming,
) -> Result<FileWritten, AgentError> {
    let (dir, name) = match target(path) {
        Ok(target) => target,
        Err(e) => {
            discard(body).await;
            return Err(e);
        }
    };
    write_to(path, &dir, name, mode, body).await
}

/// Reads a body to its end (or its first error), keeping nothing.
async fn discard(mut body: Incoming) {
    while let Some(Ok(_)) = body.frame().await {}
}

/// The upload's directory (opened) and file name, checked before any byte is read.
fn target(path: &str) -> Result<(std::fs::File, &std::ffi::OsStr), AgentError> {
    let p = check_path(path)?;
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Err(not_regular(path));
    };
    // Everything below is relative to the parent's descriptor, so neither the temp
    // name nor the whole path's length can exceed a limit the final path is within.
    let dir = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(parent)
    {
        Ok(dir) => dir,
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            return Err(error(
                AgentErrorCode::FileNotFound,
                format!("{} is not a directory", parent.display()),
            ))
        }
        Err(e) => return Err(file_io(&parent.display().to_string(), &e)),
    };
    match at::kind(&dir, name) {
        Ok(Some(kind)) if kind != libc::S_IFREG => return Err(not_regular(path)),
        Ok(_) => {}
        Err(e) => return Err(file_io(path, &e)),
    }
    Ok((dir, name))
}

async fn write_to(
    path: &str,
    dir: &std::fs::File,
    name: &std::ffi::OsStr,
    mode: u32,
    body: Incoming,
) -> Result<FileWritten, AgentError> {
    // A fixed-length name (49 bytes), whatever the file's own name is.
    let tmp = format!(".sandboxd-upload-{}", uuid::Uuid::new_v4().simple());
    let result = match fill(dir, &tmp, mode, body).await {
        Ok(n) => match at::rename(dir, &tmp, name) {
            Ok(()) => sync(dir.try_clone()).await.map(|()| n),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match result {
        Ok(bytes_written) => Ok(FileWritten {
            path: path.to_owned(),
            bytes_written,
        }),
        Err(e) => {
            at::remove(dir, &tmp);
            Err(file_io(path, &e))
        }
    }
}

async fn fill(dir: &std::fs::File, tmp: &str, mode: u32, body: Incoming) -> io::Result<u64> {
    let file = at::create(dir, tmp)?;
    let mut file = tokio::fs::File::from_std(file);
    let mut stream = body.into_data_stream().map_err(io::Error::other);
    let mut written = 0u64;
    while let Some(data) = stream.try_next().await? {
        if let Err(e) = file.write_all(&data).await {
            // Read the rest before answering: a client still sending would otherwise
            // meet a closed connection instead of the error (a full disk, say).
            while let Ok(Some(_)) = stream.try_next().await {}
            return Err(e);
        }
        written += data.len() as u64;
    }
    file.flush().await?;
    let file = file.into_std().await;
    // fchmod: exact bits, unaffected by the umask.
    file.set_permissions(Permissions::from_mode(mode))?;
    // Writeback errors (ENOSPC or EIO of the disk beneath) surface here, not at write.
    tokio::task::spawn_blocking(move || file.sync_all())
        .await
        .map_err(io::Error::other)??;
    Ok(written)
}

/// `fsync` of a directory, so that a rename into it is durable.
async fn sync(dir: io::Result<std::fs::File>) -> io::Result<()> {
    let dir = dir?;
    tokio::task::spawn_blocking(move || dir.sync_all())
        .await
        .map_err(io::Error::other)?
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
