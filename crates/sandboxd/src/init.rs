//! `sandboxd __sandbox-init`: sets up a new sandbox from inside, then becomes its agent.

use clap::Args;

#[derive(Args)]
pub struct InitArgs {
    /// File descriptor of the handshake socket shared with the backend.
    #[arg(long)]
    pub sync_fd: i32,
}

pub fn main(args: InitArgs) -> std::process::ExitCode {
    let _ = args.sync_fd;
    std::process::ExitCode::FAILURE
}
