//! `sandboxd sandbox create|list|get|exec|pause|resume|delete`: the OpenRelay API from
//! the command line, with a human summary by default and the server's JSON on `--json`.

use crate::cli_http::{describe_error, Target};
use anyhow::{bail, Result};
use clap::Subcommand;
use serde_json::{json, Value};
use std::io::Write;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum SandboxCommand {
    /// Create a sandbox from a template, optionally running a first command (its output
    /// streams to stdout/stderr; the exit code becomes this command's).
    Create {
        #[arg(long)]
        template: String,
        /// Shell command to run first.
        #[arg(long)]
        run: Option<String>,
        #[arg(long)]
        cpu: Option<u32>,
        #[arg(long = "memory-mib")]
        memory_mib: Option<u32>,
        #[arg(long = "timeout-seconds")]
        timeout_seconds: Option<u64>,
        /// Leave no history when it ends.
        #[arg(long)]
        ephemeral: bool,
        /// Isolation tier: `container` or `gvisor` [default: the template's, else the
        /// workspace's, else the server's].
        #[arg(long)]
        isolation: Option<String>,
        /// Idempotency-Key to send (makes a retry safe).
        #[arg(long = "idempotency-key")]
        idempotency_key: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// List active sandboxes, or the last 24 hours' history with `--exited`.
    List {
        #[arg(long)]
        exited: bool,
        #[command(flatten)]
        target: Target,
    },
    Get {
        id: String,
        #[command(flatten)]
        target: Target,
    },
    /// Run a shell command in a running sandbox, streaming its output.
    Exec {
        id: String,
        cmd: String,
        #[command(flatten)]
        target: Target,
    },
    Pause {
        id: String,
        #[command(flatten)]
        target: Target,
    },
    Resume {
        id: String,
        #[command(flatten)]
        target: Target,
    },
    Delete {
        id: String,
        #[command(flatten)]
        target: Target,
    },
    /// Attach this terminal to a shell in the sandbox (Runzivo terminal WebSocket).
    Shell(crate::shell::ShellArgs),
    /// A live table of the sandboxes' CPU, memory, tasks, disk and network, like `top`.
    Top(crate::cli_top::TopArgs),
}

/// One line about a sandbox.
fn summary(v: &Value) -> String {
    let reason = v["exitReason"]
        .as_str()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    format!(
        "{}  {}{}  template={} isolation={} cpu={} memoryMiB={} expires={}",
        v["id"].as_str().unwrap_or("?"),
        v["state"].as_str().unwrap_or("?"),
        reason,
        v["template"].as_str().unwrap_or("?"),
        v["isolation"].as_str().unwrap_or("?"),
        v["cpu"],
        v["memoryMiB"],
        v["expiresAt"].as_str().unwrap_or("?")
    )
}

fn show(target: &Target, v: &Value) {
    match target.json {
        true => println!("{v}"),
        false => println!("{}", summary(v)),
    }
}

pub fn main(command: SandboxCommand) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(command))
}

async fn run(command: SandboxCommand) -> Result<ExitCode> {
    use SandboxCommand::*;
    match command {
        Create {
            template,
            run,
            cpu,
            memory_mib,
            timeout_seconds,
            ephemeral,
            isolation,
            idempotency_key,
            target,
        } => {
            let mut body = json!({ "template": template, "ephemeral": ephemeral });
            if let Some(tier) = isolation {
                body["isolation"] = json!(tier);
            }
            let fields = [
                ("cpu", cpu.map(u64::from)),
                ("memoryMiB", memory_mib.map(u64::from)),
                ("timeoutSeconds", timeout_seconds),
            ];
            for (name, value) in fields {
                if let Some(v) = value {
                    body[name] = json!(v);
                }
            }
            if let Some(cmd) = run {
                body["run"] = json!({ "cmd": cmd });
            }
            let headers: Vec<(&str, String)> = idempotency_key
                .map(|k| ("idempotency-key", k))
                .into_iter()
                .collect();
            streamed(&target, "/v1/sandboxes", &body, &headers).await
        }
        List { exited, target } => {
            let path = if exited {
                "/v1/sandboxes?state=exited&limit=100"
            } else {
                "/v1/sandboxes?limit=100"
            };
            let v = target.call("GET", path, None).await?;
            match target.json {
                true => println!("{v}"),
                false => v["sandboxes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .for_each(|s| println!("{}", summary(s))),
            }
            Ok(ExitCode::SUCCESS)
        }
        Get { id, target } => one(&target, "GET", &format!("/v1/sandboxes/{id}")).await,
        Pause { id, target } => one(&target, "POST", &format!("/v1/sandboxes/{id}/pause")).await,
        Resume { id, target } => one(&target, "POST", &format!("/v1/sandboxes/{id}/resume")).await,
        Delete { id, target } => one(&target, "DELETE", &format!("/v1/sandboxes/{id}")).await,
        Shell(args) => crate::shell::run(args).await,
        Top(args) => crate::cli_top::run(args).await,
        Exec { id, cmd, target } => {
            let path = format!("/v1/sandboxes/{id}/exec");
            streamed(&target, &path, &json!({ "cmd": cmd }), &[]).await
        }
    }
}

async fn one(target: &Target, method: &str, path: &str) -> Result<ExitCode> {
    show(target, &target.call(method, path, None).await?);
    Ok(ExitCode::SUCCESS)
}

/// Sends `body` asking for NDJSON; prints output as it arrives (or every event with
/// `--json`) and exits with the command's exit code.
async fn streamed(
    target: &Target,
    path: &str,
    body: &Value,
    headers: &[(&str, String)],
) -> Result<ExitCode> {
    let answer = target.send("POST", path, Some(body), true, headers).await?;
    if !(200..300).contains(&answer.status) {
        let status = answer.status;
        bail!("{}", describe_error(status, &answer.json().await?));
    }
    let mut code: Option<i32> = None;
    let mut failure: Option<String> = None;
    answer
        .lines(|event| {
            if target.json {
                println!("{event}");
                return;
            }
            match event["type"].as_str() {
                Some("sandbox") => eprintln!("{}", summary(&event["sandbox"])),
                Some("stdout") => {
                    print!("{}", event["data"].as_str().unwrap_or(""));
                    let _ = std::io::stdout().flush();
                }
                Some("stderr") => eprint!("{}", event["data"].as_str().unwrap_or("")),
                Some("exit") => {
                    code = event["exitCode"].as_i64().map(|c| c as i32);
                    failure = event["error"]["error"].as_str().map(String::from);
                }
                _ => {}
            }
        })
        .await?;
    if let Some(message) = failure {
        bail!("the command failed: {message}");
    }
    // Without a command there is no exit event: success.
    Ok(match code {
        None | Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
    })
}
