//! `sandboxd secrets set|list|delete`: workspace secrets (stored encrypted, never
//! printed) straight on the data directory's store, safe beside a running `serve`.

use crate::keys::{find_workspace, DataDirArg};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use sandboxd_engine::accounts::Accounts;
use sandboxd_engine::DEFAULT_WORKSPACE;
use std::io::Read;

#[derive(Subcommand)]
pub enum SecretsCommand {
    /// Create or replace a secret. The value comes from --value, or else from stdin
    /// (one trailing newline removed).
    Set {
        name: String,
        /// The value (visible to other local users in the process list: prefer stdin).
        #[arg(long)]
        value: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// List secret names (never values).
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Delete a secret.
    Delete {
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Args)]
pub struct Target {
    /// Workspace (id or name).
    #[arg(long, default_value = DEFAULT_WORKSPACE)]
    workspace: String,
    #[command(flatten)]
    dir: DataDirArg,
}

pub fn main(command: SecretsCommand) -> Result<()> {
    let target = match &command {
        SecretsCommand::Set { target, .. }
        | SecretsCommand::List { target }
        | SecretsCommand::Delete { target, .. } => target,
    };
    let store = target.dir.open()?;
    let accounts = Accounts::new(&store);
    let ws = find_workspace(&accounts, &target.workspace)?
        .with_context(|| format!("no workspace {:?}", target.workspace))?;
    match command {
        SecretsCommand::Set { name, value, .. } => {
            let value = match value {
                Some(v) => v,
                None => read_stdin()?,
            };
            accounts.set_secret(&ws.id, &name, &value)?;
            eprintln!("secret {name} set in workspace {}", ws.id);
        }
        SecretsCommand::List { .. } => {
            for name in accounts.list_secret_names(&ws.id)? {
                println!("{name}");
            }
        }
        SecretsCommand::Delete { name, .. } => {
            accounts.delete_secret(&ws.id, &name)?;
            eprintln!("secret {name} deleted from workspace {}", ws.id);
        }
    }
    Ok(())
}

/// Standard input as UTF-8, minus one trailing `\n` (or `\r\n`).
pub fn read_stdin() -> Result<String> {
    let mut value = String::new();
    std::io::stdin()
        .read_to_string(&mut value)
        .context("reading the secret value from stdin (UTF-8)")?;
    Ok(strip_newline(value))
}

fn strip_newline(mut value: String) -> String {
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::strip_newline;

    #[test]
    fn strips_one_trailing_newline() {
        assert_eq!(strip_newline("abc\n".into()), "abc");
        assert_eq!(strip_newline("abc\r\n".into()), "abc");
        assert_eq!(strip_newline("abc\n\n".into()), "abc\n");
        assert_eq!(strip_newline("abc".into()), "abc");
    }
}
