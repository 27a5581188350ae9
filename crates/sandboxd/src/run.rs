//! `sandboxd run`: create a sandbox in-process, run one command in it with its output
//! passed through, exit with its status, and destroy the sandbox.

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use clap::Args;
use futures_util::StreamExt;
use sandboxd_agent_protocol::{AgentClient, Frame, ProcessState, StartProcess, StreamKind};
use sandboxd_runtime::linux::DEFAULT_MAX_PTYS;
use sandboxd_runtime::{NetworkSpec, Runtime, SandboxSpec};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Args)]
pub struct RunArgs {
    /// Virtual CPUs (CPU quota) for the sandbox.
    #[arg(long, default_value_t = 1)]
    pub vcpu: u32,
    /// Memory limit in MiB.
    #[arg(long = "memory-mb", default_value_t = 512)]
    pub memory_mb: u32,
    /// Image to start from.
    #[arg(long, default_value = "default")]
    pub image: String,
    /// Data directory (layers and sandbox state).
    #[arg(long, env = "SANDBOXD_DATA_DIR", default_value = "./.sandboxd")]
    pub data_dir: PathBuf,
    /// Working directory inside the sandbox.
    #[arg(long, default_value = "/")]
    pub cwd: String,
    /// Extra environment variables, KEY=VALUE.
    #[arg(long = "env", short = 'e')]
    pub env: Vec<String>,
    /// Network: `egress` (outbound only, under no policy) or `none` (only loopback).
    #[arg(long, value_enum, default_value_t = NetworkArg::Egress)]
    pub network: NetworkArg,
    /// The command and its arguments; a bare name is looked up in the sandbox's PATH.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `--network`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum NetworkArg {
    Egress,
    None,
}

pub fn main(args: RunArgs) -> Result<ExitCode> {
    let runtime = Arc::new(crate::runtime::open_linux(
        &args.data_dir,
        None,
        DEFAULT_MAX_PTYS,
    )?);
    let network = match args.network {
        NetworkArg::Egress => NetworkSpec::egress(Vec::new()),
        NetworkArg::None => NetworkSpec::none(),
    };
    let spec = SandboxSpec {
        id: uuid::Uuid::new_v4(),
        image: args.image.clone(),
        extra_layers: vec![],
        hostname: "sandbox".into(),
        vcpu: args.vcpu,
        memory_mb: args.memory_mb,
        pids_max: 1024,
        disk_mb: 0,
    };
    let handle = runtime
        .start_with_network(&spec, &network)
        .context("starting the sandbox")?;
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the async runtime")
        .and_then(|rt| rt.block_on(run_in(&handle.agent_socket, &args)));
    let destroyed = runtime.destroy(&handle).context("destroying the sandbox");
    let code = outcome?;
    destroyed?;
    Ok(ExitCode::from(code))
}

/// Runs the command through the agent and returns the exit status byte.
async fn run_in(socket: &std::path::Path, args: &RunArgs) -> Result<u8> {
    let client = AgentClient::new(socket);
    let mut env = sandboxd_agent::AgentConfig::default().default_env;
    for pair in &args.env {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--env {pair:?} is not KEY=VALUE"))?;
        env.insert(k.to_owned(), v.to_owned());
    }
    let mut argv = args.command.clone();
    if !argv[0].starts_with('/') {
        // Resolve a bare name the way a shell would, inside the sandbox.
        let mut lookup = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            "exec \"$0\" \"$@\"".to_owned(),
        ];
        lookup.append(&mut argv);
        argv = lookup;
    }
    let id = uuid::Uuid::new_v4();
    client
        .start_process(&StartProcess {
            id,
            argv,
            env: Some(env),
            cwd: Some(args.cwd.clone()),
            // The terminal reads every byte: the command waits for it, nothing drops.
            hold_output: true,
        })
        .await
        .context("starting the command")?;
    let mut frames = client
        .output_from(id, 0, true)
        .await
        .context("following output")?;
    let b64 = base64::engine::general_purpose::STANDARD;
    while let Some(frame) = frames.next().await {
        match frame.context("reading output")? {
            Frame::Log { stream, data, .. } => {
                let bytes = b64.decode(data).context("agent sent invalid base64")?;
                match stream {
                    StreamKind::Stdout => std::io::stdout().write_all(&bytes)?,
                    StreamKind::Stderr => std::io::stderr().write_all(&bytes)?,
                }
            }
            Frame::Exit { info } => {
                std::io::stdout().flush()?;
                return Ok(match info.state {
                    ProcessState::Exited => info.exit_code.unwrap_or(1) as u8,
                    ProcessState::Killed => 128u8.wrapping_add(info.signal.unwrap_or(0) as u8),
                    _ => 1,
                });
            }
            Frame::Gap { from, to } => bail!("output bytes {from}..{to} were lost"),
            Frame::Error { code, message } => bail!("agent stream failed: {code}: {message}"),
        }
    }
    bail!("the output stream ended before the command exited")
}
