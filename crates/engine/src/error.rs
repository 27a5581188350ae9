//! The engine's one error enum with stable codes that every dialect maps in one function.

/// Stable, dialect-independent error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// A request argument is invalid (relative executable, NUL byte, bad signal, bad path…).
    InvalidArgument,
    SandboxNotFound,
    /// The operation is not allowed in the sandbox's current state.
    WrongState,
    /// An active sandbox in the workspace already has this name (with another config).
    NameTaken,
    ProcessNotFound,
    OutputNotRetained,
    FileNotFound,
    /// The path is a directory, symlink, device, socket or FIFO.
    NotARegularFile,
    FileTooLarge,
    ExecTimedOut,
    ExecOutputTooLarge,
    WaitTimedOut,
    /// The sandbox already runs as many streamed commands as allowed.
    SessionLimitReached,
    SnapshotNotFound,
    ImageNotFound,
    SecretNotFound,
    /// Server capacity is exhausted.
    CapacityExhausted,
    /// The workspace's quota (sandboxes, vCPUs, memory) is exhausted.
    QuotaExceeded,
    /// Too many creates: the workspace's rate limit refused this one (`retry_after`).
    RateLimited,
    /// The sandbox's disk (or the host's beneath it) is full or failed to store data.
    InsufficientStorage,
    /// The backend could not run the operation (agent unreachable, kernel refused…).
    Unavailable,
    /// A bug or an unexpected host failure.
    Internal,
    /// The API key that opened this request was revoked while it ran (the request, a
    /// stream or a terminal, ends; what it started in the sandbox runs on).
    KeyRevoked,
    /// The client sent its request body too slowly (the server's body pace): the
    /// request ends, nothing of it is kept.
    RequestBodyTimedOut,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::SandboxNotFound => "sandbox_not_found",
            ErrorCode::WrongState => "wrong_state",
            ErrorCode::NameTaken => "name_taken",
            ErrorCode::ProcessNotFound => "process_not_found",
            ErrorCode::OutputNotRetained => "output_not_retained",
            ErrorCode::FileNotFound => "file_not_found",
            ErrorCode::NotARegularFile => "not_a_regular_file",
            ErrorCode::FileTooLarge => "file_too_large",
            ErrorCode::ExecTimedOut => "exec_timed_out",
            ErrorCode::ExecOutputTooLarge => "exec_output_too_large",
            ErrorCode::WaitTimedOut => "wait_timed_out",
            ErrorCode::SessionLimitReached => "session_limit_reached",
            ErrorCode::SnapshotNotFound => "snapshot_not_found",
            ErrorCode::ImageNotFound => "image_not_found",
            ErrorCode::SecretNotFound => "secret_not_found",
            ErrorCode::CapacityExhausted => "capacity_exhausted",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::InsufficientStorage => "insufficient_storage",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::KeyRevoked => "key_revoked",
            ErrorCode::RequestBodyTimedOut => "request_body_timed_out",
        }
    }
}

/// An engine error: a stable code plus a message that speaks for the engine's layer.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct EngineError {
    pub code: ErrorCode,
    pub message: String,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
    /// When the request may succeed if retried (rate limits).
    pub retry_after: Option<std::time::Duration>,
    /// For `WrongState`: the state the sandbox was in (and why it ended, if it did), so a
    /// dialect can say it in its own words.
    pub state: Option<(crate::state::SandboxStatus, Option<crate::model::EndReason>)>,
}

impl EngineError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            source: None,
            retry_after: None,
            state: None,
        }
    }

    pub fn with_source(
        code: ErrorCode,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            code,
            message: message.into(),
            source: Some(Box::new(source)),
            retry_after: None,
            state: None,
        }
    }

    /// Seconds for a `Retry-After` answer: the error's own delay when it has one; else a
    /// rate refusal 1 s, a quota refusal 60 s (sandboxes must end), exhausted capacity
    /// 5 s; other errors none.
    pub fn retry_after_secs(&self) -> Option<u64> {
        if let Some(after) = self.retry_after {
            return Some(after.as_secs().max(1));
        }
        match self.code {
            ErrorCode::RateLimited => Some(1),
            ErrorCode::QuotaExceeded => Some(60),
            ErrorCode::CapacityExhausted => Some(5),
            _ => None,
        }
    }

    /// The same error, retryable after `after`.
    pub fn retry_after(mut self, after: std::time::Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }
}
