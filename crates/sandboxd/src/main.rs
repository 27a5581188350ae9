//! The `sandboxd` binary: server, in-process runner, agent entry point and tools.

mod init;
mod runtime;
mod serve;

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
    /// Serve the HTTP APIs (Inngest REST v2, …) until SIGTERM or SIGINT.
    Serve(serve::ServeArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::SandboxInit(args) => init::main(args),
        Command::Serve(args) => serve::main(args).unwrap_or_else(|err| {
            eprintln!("sandboxd serve: {err:#}");
            std::process::ExitCode::FAILURE
        }),
    }
}
