//! File download and upload, streamed and never buffered whole.

use super::Hold;
use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::{FileMeta, FileWritten, WorkspaceId};
use crate::results::ByteStream;
use crate::validate;
use futures_util::stream::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use uuid::Uuid;

/// What cut an upload's body short, as seen by [`capped`].
#[derive(Default)]
struct Cut {
    /// More than the cap arrived.
    over: AtomicBool,
    /// The client's body failed with `TimedOut`: it came slower than the server's pace.
    slow: AtomicBool,
}

/// Wraps `body` so that it fails (and sets `cut.over`) once more than `max` bytes passed,
/// and notes in `cut.slow` a body that failed because the client sent it too slowly.
fn capped(body: ByteStream, max: u64, cut: Arc<Cut>) -> ByteStream {
    let mut seen: u64 = 0;
    body.map(move |chunk| {
        let chunk = chunk.inspect_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                cut.slow.store(true, Ordering::SeqCst);
            }
        })?;
        seen = seen.saturating_add(chunk.len() as u64);
        if seen > max {
            cut.over.store(true, Ordering::SeqCst);
            return Err(std::io::Error::other("upload too large"));
        }
        Ok(chunk)
    })
    .boxed()
}

impl Engine {
    /// A regular file's metadata and its bytes as a stream, which holds one of the
    /// workspace's places in flight while it is read, and fails once the key that asked
    /// for it is revoked.
    pub async fn read_file(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        path: &str,
    ) -> Result<(FileMeta, ByteStream), EngineError> {
        validate::abs_path("path", path)?;
        let path = path.to_owned();
        let ((meta, body), slot) = self
            .with_agent_held(ws, id, |client, _| {
                Ok(async move { client.read_file(&path).await })
            })
            .await?;
        // In use while the body is read (never idle for autoPause).
        let busy = self.activity.begin(id);
        let body = futures_util::stream::unfold(Some((body, busy, slot)), |state| async move {
            let (mut body, busy, slot) = state?;
            tokio::select! {
                biased;
                () = slot.revoked() => {
                    let revoked = std::io::Error::other(crate::revocations::key_revoked());
                    Some((Err(revoked), None))
                }
                chunk = body.next() => chunk.map(|chunk| (chunk, Some((body, busy, slot)))),
            }
        })
        .boxed();
        Ok((meta.into(), body))
    }

    /// Atomically replaces `path` with the streamed `body`; past `max_bytes` the upload
    /// is aborted with `FileTooLarge` and the old file stays.
    pub async fn write_file(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        path: &str,
        mode: u32,
        body: ByteStream,
        max_bytes: u64,
    ) -> Result<FileWritten, EngineError> {
        validate::abs_path("path", path)?;
        if mode > 0o7777 {
            return Err(EngineError::invalid(format!(
                "file mode {mode:o} is not a permission mode"
            )));
        }
        let cut = Arc::new(Cut::default());
        let body = capped(body, max_bytes, cut.clone());
        let path = path.to_owned();
        let written = self
            .with_agent(ws, id, Hold::Check, |client, _| {
                Ok(async move { client.write_file(&path, mode, body).await })
            })
            .await;
        if cut.over.load(Ordering::SeqCst) {
            return Err(EngineError::new(
                ErrorCode::FileTooLarge,
                format!("the file is larger than {max_bytes} bytes"),
            ));
        }
        if cut.slow.load(Ordering::SeqCst) {
            return Err(EngineError::new(
                ErrorCode::RequestBodyTimedOut,
                "the upload came too slowly and was cut off; the file was not changed",
            ));
        }
        written.map(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[tokio::test]
    async fn the_cap_fails_the_stream_once_passed() {
        let body = || {
            let chunks = [Bytes::from_static(b"abc"), Bytes::from_static(b"def")];
            futures_util::stream::iter(chunks.map(Ok)).boxed()
        };
        let cut = Arc::new(Cut::default());
        let out: Vec<_> = capped(body(), 6, cut.clone()).collect().await;
        assert!(out.iter().all(|c| c.is_ok()) && !cut.over.load(Ordering::SeqCst));
        let out: Vec<_> = capped(body(), 5, cut.clone()).collect().await;
        assert!(out[0].is_ok() && out[1].is_err() && cut.over.load(Ordering::SeqCst));
        assert!(!cut.slow.load(Ordering::SeqCst));
    }
}
