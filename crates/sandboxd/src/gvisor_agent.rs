//! `sandboxd __gvisor-agent`: the agent as PID 1 of a gVisor sandbox, serving on a Unix
//! socket in the directory the backend binds from the host (gVisor's sentry isolates
//! it; there is no handshake, user namespace or root switch to do here).

use clap::Args;
use sandboxd_agent::AgentConfig;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

#[derive(Args)]
pub struct GvisorAgentArgs {
    /// Path of the socket to listen on (inside the sandbox).
    #[arg(long)]
    pub socket: PathBuf,
}

pub fn main(args: GvisorAgentArgs) -> std::process::ExitCode {
    // A restarted sandbox finds its old socket file (on the host) still there.
    let _ = std::fs::remove_file(&args.socket);
    let listener = match UnixListener::bind(&args.socket) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("gvisor agent: binding {}: {e}", args.socket.display());
            return std::process::ExitCode::FAILURE;
        }
    };
    sandboxd_agent::run_blocking(listener, AgentConfig::default())
}
