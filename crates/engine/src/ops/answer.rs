//! The host-side bound on an agent's answer: a call the agent does not answer while it
//! also fails a health check within the bound (frozen, stopped, out of descriptors)
//! ends with a timeout instead of holding its request (and its sandbox's busy mark).

use crate::error::{EngineError, ErrorCode};
use sandboxd_agent_protocol::{AgentClient, ClientError};
use std::future::Future;
use std::time::Duration;

/// How long the agent has to answer a health check while a call waits (30 s unless
/// `agent_answer_seconds` / `SANDBOXD_AGENT_ANSWER_SECONDS` says otherwise).
pub const DEFAULT_AGENT_ANSWER: Duration = Duration::from_secs(30);

/// The error of a call whose agent stopped answering.
pub(crate) fn not_answering(bound: Duration) -> EngineError {
    EngineError::new(
        ErrorCode::Unavailable,
        format!(
            "the sandbox did not answer within {} s (is it frozen or hung?)",
            bound.as_secs_f64()
        ),
    )
}

/// Awaits `call`; after each `bound` it waits, it asks `client` for its health, and
/// gives up (`None`) when that is not answered within `bound` either. A call that is
/// slow but whose agent answers (a long exec, an upload, a wait) runs on; an agent
/// that answers nothing is given up between one and two bounds after the call began.
pub(crate) async fn answered<T>(
    client: AgentClient,
    bound: Duration,
    call: impl Future<Output = Result<T, ClientError>>,
) -> Option<Result<T, ClientError>> {
    let watchdog = async {
        loop {
            tokio::time::sleep(bound).await;
            // An error (the agent gone) is the call's to report; only silence ends it.
            if tokio::time::timeout(bound, client.health()).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        answer = call => Some(answer),
        () = watchdog => None,
    }
}
