//! `sandboxd images pull|list|inspect|import|export|rm|prune`: OCI images in the data directory's layer
//! store, safe beside a running `serve` (layers are stored by rename, under per-blob
//! locks).

use crate::keys::DataDirArg;
use anyhow::{bail, Context, Result};
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
        /// The server's TOML configuration file (for `insecure_registries` and
        /// `disk_reserve_mb`).
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
        /// The server's TOML configuration file (for `disk_reserve_mb`).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// Show image NAME as JSON: its configuration, and each layer with its bytes.
    Inspect {
        name: String,
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// Remove image NAME (any spelling of its reference); refused while a live sandbox,
    /// a snapshot or a template uses it. Then collects the layers nothing uses any more.
    Rm {
        name: String,
        /// Spare unused layers younger than this.
        #[arg(long, default_value_t = 600)]
        grace_seconds: u64,
        #[command(flatten)]
        dir: DataDirArg,
    },
    /// Delete every stored layer that no image, snapshot, template or live sandbox uses.
    Prune {
        /// Spare layers younger than this (one a snapshot is just committing).
        #[arg(long, default_value_t = 600)]
        grace_seconds: u64,
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

/// The image store of `data_dir`, keeping the reserve the server's configuration (the
/// `config` file, then the environment) keeps.
pub fn open_with_config(
    data_dir: &std::path::Path,
    config: Option<&std::path::Path>,
) -> Result<Images> {
    let config = sandboxd_server::ServerConfig::load(config)?;
    let mut images = Images::open(data_dir)?;
    images.room.reserve_mb = config.limits().disk_policy.reserve_mb;
    Ok(images)
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
            let images = Arc::new(open_with_config(&dir.data_dir, config.as_deref())?);
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
        ImagesCommand::Import {
            file,
            name,
            config,
            dir,
        } => {
            let images = open_with_config(&dir.data_dir, config.as_deref())?;
            let image = sandboxd_images::archive::import(&images, &file, name.as_deref())
                .with_context(|| format!("importing {}", file.display()))?;
            println!("{}  {} layers", image.name, image.layers.len());
        }
        ImagesCommand::Inspect { name, dir } => {
            let images = Images::open(&dir.data_dir)?;
            let image = images
                .get(&name)
                .with_context(|| format!("no image {name:?}"))?;
            let layers: Vec<serde_json::Value> = image
                .layers
                .iter()
                .map(|l| serde_json::json!({"digest": l, "bytes": images.layer_size(l)}))
                .collect();
            let total: u64 = layers.iter().filter_map(|l| l["bytes"].as_u64()).sum();
            let view = serde_json::json!({
                "name": image.name,
                "config": image.config,
                "layers": layers,
                "bytes": total,
            });
            println!("{}", serde_json::to_string_pretty(&view)?);
        }
        ImagesCommand::Rm {
            name,
            grace_seconds,
            dir,
        } => {
            let images = Images::open(&dir.data_dir)?;
            let stored = images
                .get(&name)
                .with_context(|| format!("no image {name:?}"))?;
            let users = crate::cli_images_gc::users_of(&images, &dir.open()?, &stored.name)?;
            if !users.is_empty() {
                bail!(
                    "image {} is in use by {}; remove those first",
                    stored.name,
                    users.join(", ")
                );
            }
            println!("{}", images.remove(&stored.name)?);
            drop(images);
            // Its layers go now unless something else uses them (or they are young).
            let grace = std::time::Duration::from_secs(grace_seconds);
            match crate::cli_images_gc::collect(&dir.data_dir, grace) {
                Ok(report) => eprintln!(
                    "{} layers deleted, {} bytes freed",
                    report.layers.len(),
                    report.bytes
                ),
                Err(e) => eprintln!("layers not collected now: {e:#}"),
            }
        }
        ImagesCommand::Prune { grace_seconds, dir } => {
            let grace = std::time::Duration::from_secs(grace_seconds);
            let report = crate::cli_images_gc::collect(&dir.data_dir, grace)?;
            for layer in &report.layers {
                println!("deleted layer {layer}");
            }
            println!(
                "{} layers deleted, {} bytes freed",
                report.layers.len(),
                report.bytes
            );
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
