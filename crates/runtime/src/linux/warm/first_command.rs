//! A parked warm entry's first command, run as soon as the entry is made: an agent's
//! first request pays for what later ones do not (its code paths paged in, its first
//! child's stack, pipes and reaping; about 0.5 ms measured on a server's first exec of
//! each sandbox), so without it every sandbox's first exec was that much slower than
//! its second. `/bin/true` is run through the agent's socket as the server runs
//! commands; an image without it gets an error answer, which still pays for most of
//! that. A failure is only logged: the entry serves as well without it.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The request's body: an `ExecRequest` of the agent protocol.
const BODY: &str = r#"{"argv":["/bin/true"],"env":null,"cwd":null,"timeout_ms":5000,"max_output_bytes":4096}"#;
/// How long the agent may take to answer (a hung one leaves the make to its deadline).
const WAIT: Duration = Duration::from_secs(10);

/// Runs the first command of the agent listening on `socket`.
pub(super) fn run(socket: &Path) {
    if let Err(e) = exchange(socket) {
        tracing::debug!(socket = %socket.display(), error = %e, "a warm init's first command");
    }
}

fn exchange(socket: &Path) -> std::io::Result<()> {
    let mut stream = UnixStream::connect(socket)?;
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
    match answer.starts_with(b"HTTP/1.1 200") {
        true => Ok(()),
        false => Err(std::io::Error::other(format!(
            "answered {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        ))),
    }
}
