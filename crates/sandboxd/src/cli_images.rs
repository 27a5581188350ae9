//! `sandboxd images pull|list|import|export`: OCI images in the data directory's layer
//! store, safe beside a running `serve` (layers are stored by rename, under per-blob
//! locks).

use crate::keys::DataDirArg;
use anyhow::{Context, Result};
use clap::Subcommand;
use sandboxd_images::Images;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Subcommand)]
pub enum ImagesCommand {
    /// Pull REF (`name:tag`, `host:port/team/app:1.4`, `…@sha256:…`) from its registry,
    /// with its stored credential (`sandboxd registry login`) if any. Registries on
    /// loopback are spoken to over plain HTTP, others over HTTPS unless listed in the
    /// configuration's `insecure_registries` or with --insecure-registry.
    Pull {
        reference: String,
        /// A registry (`host[:port]`) to reach over plain HTTP (repeatable).
        #[arg(long = "insecure-registry")]
        insecure: Vec<String>,
        /// The server's TOML configuration file (for `insecure_registries`).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// List stored images: name, layers, bytes.
    List {
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// Import a `docker save` tarball or an OCI archive/layout (file or directory).
    Import {
        file: PathBuf,
        /// Name to store it under (default: the name the archive carries).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// Export image NAME as an OCI archive (`skopeo copy oci-archive:FILE …`).
    Export {
        name: String,
        file: PathBuf,
        /// The tag recorded in the archive (default: NAME).
        #[arg(long)]
        tag: Option<String>,
        #[command(flatten)]
        dir: DataDirArg,
    },
}

pub fn main(command: ImagesCommand) -> Result<()> {
    match command {
        ImagesCommand::Pull {
            reference,
            insecure,
            config,
            dir,
        } => {
            let options = crate::cli_registry::pull_options(&dir, config.as_deref(), insecure)?;
            let images = Arc::new(Images::open(&dir.data_dir)?);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let image = rt
                .block_on(sandboxd_images::pull::pull(images, &reference, &options))
                .with_context(|| format!("pulling {reference}"))?;
            println!(
                "{}  {}  {} layers",
                image.name,
                image.config.manifest_digest.as_deref().unwrap_or("-"),
                image.layers.len()
            );
        }
        ImagesCommand::List { dir } => {
            let images = Images::open(&dir.data_dir)?;
            for image in images.list() {
                let bytes: u64 = image.layers.iter().map(|l| images.layer_size(l)).sum();
                println!(
                    "{}  {} layers  {} bytes",
                    image.name,
                    image.layers.len(),
                    bytes
                );
            }
        }
        ImagesCommand::Import { file, name, dir } => {
            let images = Images::open(&dir.data_dir)?;
            let image = sandboxd_images::archive::import(&images, &file, name.as_deref())
                .with_context(|| format!("importing {}", file.display()))?;
            println!("{}  {} layers", image.name, image.layers.len());
        }
        ImagesCommand::Export {
            name,
            file,
            tag,
            dir,
        } => {
            let images = Images::open(&dir.data_dir)?;
            let tag = tag.unwrap_or_else(|| name.clone());
            sandboxd_images::export::export(&images, &name, &file, &tag)
                .with_context(|| format!("exporting {name}"))?;
        }
    }
    Ok(())
}
