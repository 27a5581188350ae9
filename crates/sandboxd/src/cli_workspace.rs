//! `sandboxd workspace set-image|show-image`: a workspace's default image, the one its
//! creates that name no image start from (Inngest's create names none), straight on
//! the data directory's store; a running `serve` uses it at its next create.

use crate::keys::{find_workspace, DataDirArg};
use anyhow::{Context, Result};
use clap::Subcommand;
use sandboxd_engine::accounts::Accounts;
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
}

pub fn main(command: WorkspaceCommand) -> Result<()> {
    let (WorkspaceCommand::SetImage { workspace, dir, .. }
    | WorkspaceCommand::ShowImage { workspace, dir }) = &command;
    let store = dir.open()?;
    let ws = find_workspace(&Accounts::new(&store), workspace)?
        .with_context(|| format!("no workspace {workspace:?}"))?;
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
