//! The `sandboxd` binary: server, in-process runner, agent entry point and tools.

mod init;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "sandboxd", version, about = "Self-hosted sandbox server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Internal: the first process of a new sandbox (started by the Linux backend).
    #[command(name = "__sandbox-init", hide = true)]
    SandboxInit(init::InitArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::SandboxInit(args) => init::main(args),
    }
}
