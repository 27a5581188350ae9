//! `sandboxd console link`: writes a one-time, short-lived sign-in code for the web
//! console to the data directory's store (so it works beside a running server) and
//! prints the URL that spends it.

use crate::keys::{find_workspace, DataDirArg};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use sandboxd_engine::accounts::Accounts;
use sandboxd_engine::console_codes::CONSOLE_CODE_TTL;

#[derive(Subcommand)]
pub enum ConsoleCommand {
    /// Print a one-time sign-in link (valid 10 minutes unless told, usable once).
    Link(LinkArgs),
}

#[derive(Args)]
pub struct LinkArgs {
    /// Workspace (id or name) the console session acts in.
    #[arg(long, default_value = sandboxd_engine::DEFAULT_WORKSPACE)]
    workspace: String,
    /// The server's URL as the browser reaches it.
    #[arg(long, env = "SANDBOXD_URL", default_value = "http://127.0.0.1:7420")]
    url: String,
    /// How long the link stays valid, in seconds.
    #[arg(long = "valid-seconds", value_parser = clap::value_parser!(u32).range(1..=3600))]
    valid_seconds: Option<u32>,
    #[command(flatten)]
    dir: DataDirArg,
}

pub fn main(command: ConsoleCommand) -> Result<()> {
    let ConsoleCommand::Link(args) = command;
    let store = args.dir.open()?;
    let accounts = Accounts::new(&store);
    let ws = find_workspace(&accounts, &args.workspace)?.with_context(|| {
        format!(
            "no workspace {:?} (the default one appears at the server's first start \
             with a master key)",
            args.workspace
        )
    })?;
    let ttl = args
        .valid_seconds
        .map_or(CONSOLE_CODE_TTL, |s| time::Duration::seconds(s.into()));
    let code = accounts.create_console_code(&ws.id, ttl)?;
    let base = args.url.trim_end_matches('/');
    println!("{base}/console/login?code={code}");
    eprintln!(
        "one-time sign-in link for workspace {}; valid {} seconds",
        ws.id,
        ttl.whole_seconds()
    );
    Ok(())
}
