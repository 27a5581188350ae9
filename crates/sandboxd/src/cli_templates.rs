//! `sandboxd templates build|list|delete`: workspace templates through the server
//! (a build runs its steps in a sandbox there and snapshots it).

use crate::cli_http::Target;
use anyhow::Result;
use clap::Subcommand;
use serde_json::{json, Value};

#[derive(Subcommand)]
pub enum TemplatesCommand {
    /// Build template NAME: start a sandbox of BASE, run each `--run` step with
    /// `/bin/sh -c` (the first failure stops the build), and save its filesystem.
    Build {
        name: String,
        #[arg(long, default_value = "default")]
        from: String,
        /// A build step (repeatable, run in order).
        #[arg(long = "run")]
        steps: Vec<String>,
        /// The template's vCPUs (default: the base's).
        #[arg(long)]
        cpu: Option<u32>,
        /// The template's memory in MiB (default: the base's).
        #[arg(long = "memory-mib")]
        memory_mib: Option<u32>,
        /// The disk (writable layer) of its sandboxes in MiB, 0 = no limit (default:
        /// the base's; a built-in base's is the server's default). At most the server's
        /// maximum.
        #[arg(long = "disk-mb", visible_alias = "disk-mib")]
        disk_mb: Option<u32>,
        #[command(flatten)]
        target: Target,
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
            steps,
            cpu,
            memory_mib,
            disk_mb,
            target,
        } => {
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
