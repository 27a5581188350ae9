//! `sandboxd templates build|list|delete`: workspace templates through the server
//! (a build runs its steps in a sandbox there and snapshots it).

use crate::cli_http::Target;
use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

// Parsed once per process: the size of the Build variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum TemplatesCommand {
    /// Build template NAME: start a sandbox of BASE, run each `--run` step with
    /// `/bin/sh -c` (the first failure stops the build), and save its filesystem.
    /// With `--file`, build it from a Dockerfile instead, here (over `--data-dir`, with
    /// the server's `--config`): RUN steps run in sandboxes, COPY/ADD read the build
    /// context, every step is cached; the template is a stored image.
    Build {
        name: String,
        #[arg(long, default_value = "default", conflicts_with_all = ["from_image", "file"])]
        from: String,
        /// Start from OCI image REF, pulled into `--data-dir` first when not stored.
        #[arg(long = "from-image", value_name = "REF", conflicts_with = "file")]
        from_image: Option<String>,
        /// A build step (repeatable, run in order).
        #[arg(long = "run", conflicts_with = "file")]
        steps: Vec<String>,
        /// A Dockerfile to build (FROM, RUN, COPY, ADD, ENV, WORKDIR, USER, ARG, LABEL,
        /// CMD, ENTRYPOINT).
        #[arg(long, short = 'f')]
        file: Option<PathBuf>,
        /// The build context COPY and ADD read from (default: the Dockerfile's directory).
        #[arg(long, requires = "file")]
        context: Option<PathBuf>,
        /// A value for an ARG, KEY=VALUE (repeatable).
        #[arg(long = "build-arg", requires = "file")]
        build_args: Vec<String>,
        /// The template's vCPUs (default: the base's; a Dockerfile's RUN steps: 1).
        #[arg(long)]
        cpu: Option<u32>,
        /// The template's memory in MiB (default: the base's; a Dockerfile's RUN steps:
        /// 1024).
        #[arg(long = "memory-mib")]
        memory_mib: Option<u32>,
        /// The disk (writable layer) of its sandboxes in MiB, 0 = no limit (default:
        /// the base's; a built-in base's is the server's default). At most the server's
        /// maximum.
        #[arg(long = "disk-mb", visible_alias = "disk-mib")]
        disk_mb: Option<u32>,
        /// The server's data directory (`--file` and `--from-image`).
        #[arg(
            long = "data-dir",
            env = "SANDBOXD_DATA_DIR",
            default_value = "./.sandboxd"
        )]
        data_dir: PathBuf,
        /// The server's TOML configuration (`--file` and `--from-image`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Server base URL (http only).
        #[arg(long, env = "SANDBOXD_URL", default_value = "http://127.0.0.1:7420")]
        url: String,
        /// API key (not needed with `--file`).
        #[arg(long, env = "SANDBOXD_KEY", hide_env_values = true)]
        key: Option<String>,
        /// Print the server's JSON instead of the human summary.
        #[arg(long)]
        json: bool,
    },
    /// List built-in and workspace templates.
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Delete a workspace template.
    Delete {
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

fn summary(t: &Value) -> String {
    format!(
        "{}  cpu={} memoryMiB={} diskMiB={}  {}",
        t["id"].as_str().unwrap_or("?"),
        t["cpu"],
        t["memoryMiB"],
        t["diskMiB"],
        if t["builtin"] == true {
            "built-in"
        } else {
            "workspace"
        }
    )
}

pub fn main(command: TemplatesCommand) -> Result<()> {
    let command = match command {
        TemplatesCommand::Build {
            name,
            file: Some(file),
            context,
            build_args,
            cpu,
            memory_mib,
            disk_mb,
            data_dir,
            config,
            ..
        } => {
            return crate::build::main(crate::build::DockerfileBuild {
                name,
                file,
                context,
                build_args,
                cpu,
                memory_mib,
                disk_mb,
                data_dir,
                config,
            })
        }
        other => other,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(command))
}

async fn run(command: TemplatesCommand) -> Result<()> {
    let (target, v) = match command {
        TemplatesCommand::Build {
            name,
            from,
            from_image,
            steps,
            cpu,
            memory_mib,
            disk_mb,
            data_dir,
            config,
            url,
            key,
            json,
            ..
        } => {
            let target = Target {
                url,
                key: key.context("--key (or SANDBOXD_KEY) is needed")?,
                json,
            };
            let from = match from_image {
                Some(reference) => {
                    pull_if_missing(&reference, data_dir, config.as_deref()).await?;
                    reference
                }
                None => from,
            };
            let mut body = json!({ "name": name, "from": from, "run": steps });
            if let Some(cpu) = cpu {
                body["cpu"] = json!(cpu);
            }
            if let Some(m) = memory_mib {
                body["memoryMiB"] = json!(m);
            }
            if let Some(d) = disk_mb {
                body["diskMiB"] = json!(d);
            }
            let v = target
                .call("POST", "/v1/sandbox-templates", Some(&body))
                .await?;
            (target, v)
        }
        TemplatesCommand::List { target } => {
            let v = target.call("GET", "/v1/sandbox-templates", None).await?;
            if !target.json {
                v["templates"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .for_each(|t| println!("{}", summary(t)));
                return Ok(());
            }
            (target, v)
        }
        TemplatesCommand::Delete { name, target } => {
            let v = target
                .call("DELETE", &format!("/v1/sandbox-templates/{name}"), None)
                .await?;
            (target, v)
        }
    };
    match target.json {
        true => println!("{v}"),
        false => println!("{}", summary(&v)),
    }
    Ok(())
}

/// `--from-image`: pulls `reference` into the data directory unless it is stored.
async fn pull_if_missing(reference: &str, data_dir: PathBuf, config: Option<&Path>) -> Result<()> {
    let mut config = sandboxd_server::ServerConfig::load(config)?;
    config.data_dir = data_dir;
    let store =
        sandboxd_store::SqliteStore::open(config.data_dir.join(crate::serve::DATABASE_FILE))
            .context("opening the sandbox database")?;
    crate::run::ensure_image(&config, &store, reference).await
}
