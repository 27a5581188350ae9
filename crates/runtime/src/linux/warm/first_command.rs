//! A parked warm entry's first request, made as soon as the entry is made: an agent's
//! first command pays for what later ones do not (its request path paged in, its first
//! child's stack, pipes and spawn; part of the 0.3-0.5 ms by which a server's first exec
//! of each sandbox was slower than its second), so the entry pays it instead. The
//! command asked for cannot exist in any image (a path below `/dev/null`), so the agent
//! goes through a whole spawn and answers `spawn_failed`, and nothing of the image runs
//! before a sandbox is asked for. A failure is only logged: the entry serves as well
//! without it.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// The request's body: an `ExecRequest` of the agent protocol.
const BODY: &str = r#"{"argv":["/dev/null/sandboxd-warm-up"],"env":null,"cwd":null,"timeout_ms":5000,"max_output_bytes":4096}"#;
/// How long the agent may take to answer.
const WAIT: Duration = Duration::from_secs(5);

/// Makes the first request of the agent listening on `socket`.
pub(super) fn run(socket: &Path) {
    if let Err(e) = exchange(socket) {
        tracing::debug!(socket = %socket.display(), error = %e, "a warm init's first request");
    }
}

fn exchange(socket: &Path) -> std::io::Result<()> {
    let mut stream = sandboxd_agent_protocol::socket_path::connect(socket)?;
    stream.set_read_timeout(Some(WAIT))?;
    stream.set_write_timeout(Some(WAIT))?;
    let request = format!(
        "POST /v1/exec HTTP/1.1\r\nhost: agent\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    match answer.starts_with(b"HTTP/1.1 ") {
        true => Ok(()),
        false => Err(std::io::Error::other("no HTTP answer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_an_exec_request_of_a_command_no_image_can_hold() {
        let req: sandboxd_agent_protocol::ExecRequest =
            serde_json::from_str(BODY).expect("an ExecRequest");
        assert!(req.argv[0].starts_with("/dev/null/"), "{:?}", req.argv);
        assert!(req.user.is_none() && req.env.is_none());
    }
}
