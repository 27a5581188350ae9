//! `sandboxd workspace set-image|show-image|set-isolation|show-isolation`: a
//! workspace's default image, the one its creates that name no image start from
//! (Inngest's create names none), and its default isolation tier, the one its creates
//! that choose none (by request or template) run on; straight on the data directory's
//! store; a running `serve` uses them at its next create.

use crate::keys::{find_workspace, DataDirArg};
use anyhow::{Context, Result};
use clap::Subcommand;
use sandboxd_engine::accounts::Accounts;
use sandboxd_engine::Isolation;
use sandboxd_images::Images;
use sandboxd_store::Store;

#[derive(Subcommand)]
pub enum WorkspaceCommand {
    /// Set workspace W's default image to REF, a stored image (`sandboxd images pull`)
    /// under any spelling of its reference; `default` goes back to the built-in image.
    SetImage {
        /// Workspace (id or name).
        workspace: String,
        image: String,
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// Print workspace W's default image.
    ShowImage {
        /// Workspace (id or name).
        workspace: String,
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// Set workspace W's default isolation tier: `container` or `gvisor`; `server`
    /// clears it (the server's `isolation` applies again). A create's own choice and
    /// its template's go first.
    SetIsolation {
        /// Workspace (id or name).
        workspace: String,
        isolation: String,
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// Print workspace W's default isolation tier (`server`: none set).
    ShowIsolation {
        /// Workspace (id or name).
        workspace: String,
        #[command(flatten)]
        dir: DataDirArg,
    },
}

pub fn main(command: WorkspaceCommand) -> Result<()> {
    let (WorkspaceCommand::SetImage { workspace, dir, .. }
    | WorkspaceCommand::ShowImage { workspace, dir }
    | WorkspaceCommand::SetIsolation { workspace, dir, .. }
    | WorkspaceCommand::ShowIsolation { workspace, dir }) = &command;
    let store = dir.open()?;
    let ws = find_workspace(&Accounts::new(&store), workspace)?
        .with_context(|| format!("no workspace {workspace:?}"))?;
    match &command {
        WorkspaceCommand::SetIsolation { isolation, .. } => {
            return set_isolation(&store, &ws.id, isolation)
        }
        WorkspaceCommand::ShowIsolation { .. } => return show_isolation(&store, &ws.id),
        _ => {}
    }
    if let WorkspaceCommand::SetImage { image, dir, .. } = &command {
        let stored = match image.as_str() {
            "default" => None,
            _ => {
                let images = Images::open(&dir.data_dir)?;
                let found = images.get(image).with_context(|| {
                    format!("image {image:?} is not stored; pull it first: sandboxd images pull {image}")
                })?;
                Some(found.name)
            }
        };
        store.set_workspace_image(&ws.id, stored.as_deref())?;
        eprintln!("default image of workspace {} set", ws.id);
    }
    let current = store.get_workspace_image(&ws.id)?;
    println!("{}", current.as_deref().unwrap_or("default"));
    Ok(())
}

/// `set-isolation`: checks the tier's name, stores it (or clears it for `server`).
fn set_isolation(store: &impl Store, ws: &str, name: &str) -> Result<()> {
    let tier = match name {
        "server" => None,
        _ => Some(name.parse::<Isolation>()?),
    };
    store.set_workspace_isolation(ws, tier.map(Isolation::as_str))?;
    eprintln!("default isolation tier of workspace {ws} set");
    show_isolation(store, ws)
}

/// `show-isolation`: the stored tier, or `server` when none is.
fn show_isolation(store: &impl Store, ws: &str) -> Result<()> {
    let current = store.get_workspace_isolation(ws)?;
    println!("{}", current.as_deref().unwrap_or("server"));
    Ok(())
}
