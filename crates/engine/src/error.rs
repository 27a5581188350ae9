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
    /// The backend could not run the operation (agent unreachable, kernel refused…).
    Unavailable,
    /// A bug or an unexpected host failure.
    Internal,
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
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
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
}

impl EngineError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            source: None,
            retry_after: None,
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
        }
    }

    /// Seconds for a `Retry-After` answer: a rate refusal's own delay; a quota refusal
    /// waits for sandboxes to end (60 s); other errors their own delay if they have one
    /// (a busy database), else none.
    pub fn retry_after_secs(&self) -> Option<u64> {
        let own = self.retry_after.map(|d| d.as_secs().max(1));
        match self.code {
            ErrorCode::RateLimited => Some(own.unwrap_or(1)),
            ErrorCode::QuotaExceeded => Some(60),
            _ => own,
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
