//! The one mapping from agent client errors to engine error codes.

use crate::error::{EngineError, ErrorCode};
use sandboxd_agent_protocol::{AgentErrorCode, ClientError};

/// Whether the error may mean the agent is gone: it could not be reached, or the
/// exchange broke off (an agent that died while a kept connection sat idle shows so).
/// The caller checks whether the agent still runs before it concludes anything.
pub(crate) fn is_unreachable(e: &ClientError) -> bool {
    matches!(e, ClientError::Connect { .. } | ClientError::Protocol(_))
}

/// Maps every agent client error to an engine error.
pub(crate) fn map(e: ClientError) -> EngineError {
    if is_unreachable(&e) {
        crate::metrics::agent_connection_error();
    }
    let (code, message) = match &e {
        ClientError::Agent(a) => (
            match a.code {
                AgentErrorCode::InvalidArgument => ErrorCode::InvalidArgument,
                AgentErrorCode::ProcessNotFound => ErrorCode::ProcessNotFound,
                AgentErrorCode::OutputNotRetained => ErrorCode::OutputNotRetained,
                AgentErrorCode::ProcessExists => ErrorCode::Internal,
                AgentErrorCode::WaitTimedOut => ErrorCode::WaitTimedOut,
                AgentErrorCode::FileNotFound => ErrorCode::FileNotFound,
                AgentErrorCode::NotARegularFile => ErrorCode::NotARegularFile,
                AgentErrorCode::FileTooLarge => ErrorCode::FileTooLarge,
                AgentErrorCode::SpawnFailed => ErrorCode::InvalidArgument,
                AgentErrorCode::InsufficientStorage => ErrorCode::InsufficientStorage,
                AgentErrorCode::Io => ErrorCode::Internal,
            },
            a.message.clone(),
        ),
        ClientError::Connect { .. } => (
            ErrorCode::Unavailable,
            "the sandbox agent is unreachable".into(),
        ),
        ClientError::Protocol(_) => (
            ErrorCode::Unavailable,
            "the sandbox agent answered badly".into(),
        ),
        // The client's upload broke off (it is gone, or sent less than it said): its
        // mistake, and no sign of the agent's health.
        ClientError::RequestBody(_) => (
            ErrorCode::InvalidArgument,
            "the request's body broke off before its end; nothing was written".into(),
        ),
        // The agent is untrusted: an answer past its cap is refused, never held.
        ClientError::TooLarge { limit } => (
            ErrorCode::Unavailable,
            format!("the sandbox agent's answer was larger than {limit} bytes"),
        ),
    };
    EngineError::with_source(code, message, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_agent_protocol::AgentError;

    #[test]
    fn maps_agent_codes_and_connection_failures() {
        let agent = |code| {
            ClientError::Agent(AgentError {
                code,
                message: "m".into(),
            })
        };
        assert_eq!(
            map(agent(AgentErrorCode::WaitTimedOut)).code,
            ErrorCode::WaitTimedOut
        );
        assert_eq!(
            map(agent(AgentErrorCode::SpawnFailed)).code,
            ErrorCode::InvalidArgument
        );
        assert_eq!(map(agent(AgentErrorCode::FileNotFound)).message, "m");
        let gone = ClientError::Connect {
            path: "/nowhere".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert!(is_unreachable(&gone));
        assert_eq!(map(gone).code, ErrorCode::Unavailable);
        let broken = ClientError::Protocol("connection closed before message completed".into());
        assert!(is_unreachable(&broken));
        assert!(!is_unreachable(&agent(AgentErrorCode::FileNotFound)));
        let aborted = ClientError::RequestBody("connection reset".into());
        assert!(!is_unreachable(&aborted));
        assert_eq!(map(aborted).code, ErrorCode::InvalidArgument);
        let huge = ClientError::TooLarge { limit: 16 << 20 };
        assert!(!is_unreachable(&huge));
        let mapped = map(huge);
        assert_eq!(mapped.code, ErrorCode::Unavailable);
        assert!(mapped.message.contains("larger than 16777216 bytes"));
    }
}
