//! `sandboxd __sandbox-init`: sets up a new sandbox from inside, then becomes its agent.

use clap::Args;
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;

#[derive(Args)]
pub struct InitArgs {
    /// File descriptor of the handshake socket shared with the backend.
    #[arg(long)]
    pub sync_fd: i32,
}

pub fn main(args: InitArgs) -> std::process::ExitCode {
    match sandboxd_runtime::linux::init::enter(args.sync_fd) {
        Ok(entered) => serve(entered.listener),
        Err(e) => {
            eprintln!("sandbox init failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Stand-in until the agent crate exports `run_blocking`: answers `GET /v1/health`.
fn serve(listener: UnixListener) -> ! {
    loop {
        let Ok((mut conn, _)) = listener.accept() else { continue };
        let mut buf = [0u8; 4096];
        let mut len = 0;
        while len < buf.len() {
            match conn.read(&mut buf[len..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n,
            }
            if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        let (status, body) = if buf[..len].starts_with(b"GET /v1/health ") {
            ("200 OK", format!("{{\"protocol\":1,\"pid\":{}}}", std::process::id()))
        } else {
            ("404 Not Found", "{\"error\":\"not found\"}".to_string())
        };
        let response = format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        let _ = conn.write_all(response.as_bytes());
    }
}
