//! Shutting down: once the server says so, every output and log stream the engine
//! handed out ends with an `Unavailable` error, which each dialect sends as its own
//! terminal frame, so no follower holds the server open. Sandboxes keep running.

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::output::OutputStream;
use futures_util::stream::StreamExt;
use tokio_util::sync::CancellationToken;

impl Engine {
    /// Ends every stream handed out (and every one handed out later) with a terminal
    /// error. Idempotent.
    pub fn begin_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Cancelled once [`Engine::begin_shutdown`] is called: stream code that is not a
    /// [`OutputStream`] selects on it to end with its own terminal frame.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// `frames`, ended by one `Unavailable` error once the server begins to shut down.
    pub(crate) fn until_shutdown(&self, frames: OutputStream) -> OutputStream {
        until(frames, self.shutdown.clone())
    }
}

/// `frames`, ended by one `Unavailable` error once `token` is cancelled.
fn until(frames: OutputStream, token: CancellationToken) -> OutputStream {
    futures_util::stream::unfold(Some((frames, token)), |state| async move {
        let (mut frames, token) = state?;
        tokio::select! {
            biased;
            item = frames.next() => item.map(|item| (item, Some((frames, token)))),
            () = token.cancelled() => Some((Err(shutting_down()), None)),
        }
    })
    .boxed()
}

fn shutting_down() -> EngineError {
    EngineError::new(
        ErrorCode::Unavailable,
        "the server is shutting down; reconnect once it is back",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::OutputEvent;

    #[tokio::test]
    async fn a_stream_ends_with_one_error_at_shutdown() {
        let token = CancellationToken::new();
        let frames: OutputStream =
            futures_util::stream::iter([Ok(OutputEvent::Gap { from: 0, to: 1 })])
                .chain(futures_util::stream::pending())
                .boxed();
        let mut cut = until(frames, token.clone());
        assert!(matches!(
            cut.next().await,
            Some(Ok(OutputEvent::Gap { .. }))
        ));
        token.cancel();
        let last = cut.next().await.expect("a terminal item");
        assert_eq!(last.err().map(|e| e.code), Some(ErrorCode::Unavailable));
        assert!(
            cut.next().await.is_none(),
            "nothing after the terminal error"
        );
    }
}
