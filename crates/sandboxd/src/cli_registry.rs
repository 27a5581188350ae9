//! `sandboxd registry login|logout|list`: credentials per OCI registry, stored in the
//! data directory's store with the password or token encrypted at rest (like secrets)
//! and used by `sandboxd images pull`.

use crate::keys::DataDirArg;
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use sandboxd_images::{Credential, PullOptions};
use sandboxd_store::{RegistryCredential, SqliteStore, Store};
use std::io::Read;

#[derive(Subcommand)]
pub enum RegistryCommand {
    /// Store a credential for HOST (`host[:port]` as in image references; Docker Hub is
    /// `docker.io`). Stdin holds the user name on its first line and the password (or
    /// token) on the second; with --username, stdin is only the password; with --token,
    /// stdin is a bearer token sent as it is.
    Login {
        host: String,
        #[arg(long, conflicts_with = "token")]
        username: Option<String>,
        /// Stdin is a bearer token (no user name).
        #[arg(long)]
        token: bool,
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// Forget HOST's credential.
    Logout {
        host: String,
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// Registries with a credential, and their user names (never secrets).
    List {
        #[command(flatten)]
        dir: DataDirArg,
    },
}

pub fn main(command: RegistryCommand) -> Result<()> {
    match command {
        RegistryCommand::Login {
            host,
            username,
            token,
            dir,
        } => {
            check_host(&host)?;
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .context("reading the credential from stdin (UTF-8)")?;
            let (username, secret) = split_input(&input, username, token)?;
            dir.open()?.set_registry_credential(&RegistryCredential {
                registry: host.clone(),
                username,
                secret: secret.into_bytes(),
            })?;
            println!("stored a credential for {host}");
        }
        RegistryCommand::Logout { host, dir } => {
            if !dir.open()?.delete_registry_credential(&host)? {
                bail!("no credential for {host}");
            }
        }
        RegistryCommand::List { dir } => {
            for (host, user) in dir.open()?.list_registry_credentials()? {
                println!("{host}  {}", user.as_deref().unwrap_or("(token)"));
            }
        }
    }
    Ok(())
}

fn check_host(host: &str) -> Result<()> {
    let bad = host.is_empty()
        || host.contains('/')
        || host.chars().any(|c| c.is_whitespace() || c.is_control());
    if bad {
        bail!("{host:?} is not a registry host[:port] (no scheme, no path)");
    }
    Ok(())
}

/// (user name, secret) from stdin's text: `user\nsecret`, or the secret alone when the
/// user was given or a token is wanted.
fn split_input(
    input: &str,
    username: Option<String>,
    token: bool,
) -> Result<(Option<String>, String)> {
    let mut lines = input.lines();
    let (user, secret) = match (username, token) {
        (Some(u), _) => (Some(u), lines.next()),
        (None, true) => (None, lines.next()),
        (None, false) => {
            let user = lines.next().map(str::trim).filter(|u| !u.is_empty());
            let Some(user) = user else {
                bail!("stdin holds no user name (first line), nor --username or --token");
            };
            (Some(user.to_owned()), lines.next())
        }
    };
    match secret.filter(|s| !s.is_empty()) {
        Some(s) => Ok((user, s.to_owned())),
        None => bail!("stdin holds no password or token"),
    }
}

/// Every stored credential, for pulls.
pub fn pull_credentials(
    store: &SqliteStore,
) -> Result<std::collections::BTreeMap<String, Credential>> {
    let mut out = std::collections::BTreeMap::new();
    for (host, _) in store.list_registry_credentials()? {
        let Some(cred) = store.get_registry_credential(&host)? else {
            continue;
        };
        let secret = String::from_utf8(cred.secret).context("a stored credential is not UTF-8")?;
        let credential = match cred.username {
            Some(username) => Credential::Basic {
                username,
                password: secret,
            },
            None => Credential::Token(secret),
        };
        out.insert(host, credential);
    }
    Ok(out)
}

/// Pull options from the server's configuration (`insecure_registries`), the command
/// line's extra insecure registries and the stored credentials.
pub fn pull_options(
    dir: &DataDirArg,
    config: Option<&std::path::Path>,
    extra_insecure: Vec<String>,
) -> Result<PullOptions> {
    let config = sandboxd_server::ServerConfig::load(config)?;
    let mut insecure = config.insecure_registries;
    insecure.extend(extra_insecure);
    Ok(PullOptions {
        insecure_registries: insecure,
        credentials: pull_credentials(&dir.open()?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_holds_user_then_secret() {
        assert_eq!(
            split_input("bob\npw\n", None, false).unwrap(),
            (Some("bob".into()), "pw".into())
        );
        assert_eq!(
            split_input("pw\n", Some("al".into()), false).unwrap(),
            (Some("al".into()), "pw".into())
        );
        assert_eq!(
            split_input("tok", None, true).unwrap(),
            (None, "tok".into())
        );
        assert!(split_input("bob\n", None, false).is_err());
        assert!(split_input("", None, true).is_err());
    }
}
