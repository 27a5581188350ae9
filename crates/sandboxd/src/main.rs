//! The `sandboxd` binary: server, in-process runner, agent entry point and tools.

mod audit;
mod bench;
mod bench_base;
mod bench_fork;
mod bench_gvisor;
mod bench_http;
mod bench_images;
mod bench_speed;
mod bench_terminal;
mod build;
mod build_run;
mod cli_http;
mod cli_images;
mod cli_images_gc;
mod cli_registry;
mod cli_sandbox;
mod cli_templates;
mod cli_top;
mod cli_workspace;
mod console_link;
mod gvisor_agent;
mod init;
mod keys;
mod layer_collector;
mod legacy_run_markers;
mod network_policy;
mod quota;
mod run;
mod run_detach;
mod run_orphans;
mod run_signals_early;
mod runtime;
mod secrets;
mod serve;
mod serve_threads;
mod shell;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "sandboxd", version, about = "Self-hosted sandbox server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Internal: the first process of a new sandbox (started by the Linux backend).
    #[command(name = "__sandbox-init", hide = true)]
    SandboxInit(init::InitArgs),
    /// Internal: the agent of a gVisor sandbox (started by runsc as its PID 1).
    #[command(name = "__gvisor-agent", hide = true)]
    GvisorAgent(gvisor_agent::GvisorAgentArgs),
    /// Internal: sets a gVisor sandbox's hostname (run by the backend after a fork).
    #[command(name = "__gvisor-hostname", hide = true)]
    GvisorHostname(gvisor_agent::HostnameArgs),
    /// Internal: removes the egress networks one-shot runs parked, once they have
    /// lingered untaken (started detached by the run that parked one).
    #[command(name = "__net-reaper", hide = true)]
    NetReaper {
        /// The host's network state dir.
        state_dir: std::path::PathBuf,
    },
    /// Serve the HTTP APIs (Inngest REST v2, …) until SIGTERM or SIGINT.
    Serve(serve::ServeArgs),
    #[command(about = RUN_ABOUT, long_about = RUN_LONG_ABOUT)]
    Run(run::RunArgs),
    /// Measure sandboxd against baselines taken in the same run.
    Bench(bench::BenchArgs),
    /// Manage API keys (and their workspaces) in the data directory.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Per-workspace quota overrides in the data directory: set, show.
    #[command(subcommand)]
    Quota(quota::QuotaCommand),
    /// Print a dialect's OpenAPI 3.1 document (docs/openapi/DIALECT.json).
    Openapi(OpenapiArgs),
    /// Manage workspace secrets in the data directory.
    #[command(subcommand)]
    Secrets(secrets::SecretsCommand),
    /// Manage workspace egress policies in the data directory.
    #[command(subcommand, name = "network-policy")]
    NetworkPolicy(network_policy::NetworkPolicyCommand),
    /// Sandboxes through a server's OpenRelay API (`--url`/`--key` or SANDBOXD_URL/KEY).
    #[command(subcommand)]
    Sandbox(cli_sandbox::SandboxCommand),
    /// OCI images in the data directory: pull, list, import, export.
    #[command(subcommand)]
    Images(cli_images::ImagesCommand),
    /// Credentials per OCI registry, used by `images pull`.
    #[command(subcommand)]
    Registry(cli_registry::RegistryCommand),
    /// A workspace's settings in the data directory: its default image and isolation tier.
    #[command(subcommand)]
    Workspace(cli_workspace::WorkspaceCommand),
    /// Templates through a server's OpenRelay API: build, list, delete.
    #[command(subcommand)]
    Templates(cli_templates::TemplatesCommand),
    /// A workspace's audit trail of mutating operations, from the data directory.
    Audit(audit::AuditArgs),
    /// The web console at /console: `console link` prints a one-time sign-in link.
    #[command(subcommand)]
    Console(console_link::ConsoleCommand),
}

const RUN_ABOUT: &str = "Run one command in a fresh sandbox (no server needed), then destroy it";
const RUN_LONG_ABOUT: &str =
    "Run one command in a fresh sandbox (no server needed), then destroy it.

Exits with the command's exit code, or 128+N when signal N killed it.";

/// `sandboxd run …` as clap reads it with the run alone in its tree: a one-shot run is
/// timed from its exec, and building every subcommand's arguments costs ~0.3 ms here.
#[derive(Parser)]
#[command(name = "sandboxd", version, about = "Self-hosted sandbox server")]
struct RunCli {
    #[command(subcommand)]
    command: RunOnly,
}

#[derive(Subcommand)]
enum RunOnly {
    #[command(about = RUN_ABOUT, long_about = RUN_LONG_ABOUT)]
    Run(run::RunArgs),
}

impl Cli {
    /// Parses the command line, the run's with [`RunCli`].
    fn from_line(args: Vec<std::ffi::OsString>) -> Cli {
        if args.get(1).is_some_and(|a| a == "run") {
            let RunOnly::Run(run) = RunCli::parse_from(args).command;
            return Cli {
                command: Command::Run(run),
            };
        }
        Cli::parse_from(args)
    }
}

#[derive(clap::Args)]
struct OpenapiArgs {
    /// Whose document to print.
    #[arg(long, value_enum, default_value = "inngest")]
    dialect: Dialect,
}

/// The API dialects that have an OpenAPI document.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Dialect {
    Inngest,
    Openrelay,
    Runzivo,
}

impl Dialect {
    fn document(self) -> String {
        match self {
            Dialect::Inngest => sandboxd_dialect_inngest::openapi::document(),
            Dialect::Openrelay => sandboxd_dialect_openrelay::openapi::document(),
            Dialect::Runzivo => sandboxd_dialect_runzivo::openapi::document(),
        }
    }
}

fn main() -> std::process::ExitCode {
    // A sandbox's init starts on the start's path: read its fixed line without clap.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(init) = init::as_spawned(&args) {
        return init::main(init);
    }
    let cli = Cli::from_line(args);
    // Whatever started us may have left descriptors open (a shell's `9</`, a pipe of a
    // supervisor): none may reach a sandbox, so none survives an exec of ours. The
    // sandbox init gets its handshake descriptor on purpose and sweeps for itself.
    if !matches!(cli.command, Command::SandboxInit(_)) {
        if let Err(e) = sandboxd_confine::descriptors::close_on_exec_from(3) {
            eprintln!("sandboxd: cannot mark inherited descriptors close-on-exec: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    // The data-dir tools print listings (`keys list | head`): a reader gone ends them
    // as it ends `ls`, by SIGPIPE, instead of a panic on the failed print. Not the
    // server, a run (it tears its sandbox down) or the long-running image commands.
    if matches!(
        cli.command,
        Command::Keys(_)
            | Command::Quota(_)
            | Command::Secrets(_)
            | Command::NetworkPolicy(_)
            | Command::Workspace(_)
            | Command::Audit(_)
            | Command::Openapi(_)
            | Command::Console(_)
    ) {
        // SAFETY: restoring a signal's default disposition, before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.command {
        Command::SandboxInit(args) => init::main(args),
        Command::GvisorAgent(args) => gvisor_agent::main(args),
        Command::GvisorHostname(args) => gvisor_agent::set_hostname(args),
        Command::NetReaper { state_dir } => {
            sandboxd_runtime::faults::from_env();
            report(
                "__net-reaper",
                sandboxd_runtime::linux::net_reaper_main(&state_dir).map_err(Into::into),
            )
        }
        Command::Serve(args) => serve::main(args).unwrap_or_else(|err| {
            eprintln!("sandboxd serve: {err:#}");
            std::process::ExitCode::FAILURE
        }),
        Command::Run(args) => run::main(args).unwrap_or_else(|err| {
            eprintln!("sandboxd run: {err:#}");
            std::process::ExitCode::from(125)
        }),
        Command::Openapi(args) => {
            print!("{}", args.dialect.document());
            std::process::ExitCode::SUCCESS
        }
        Command::Keys(command) => report("keys", keys::main(command)),
        Command::Quota(command) => report("quota", quota::main(command)),
        Command::Secrets(command) => report("secrets", secrets::main(command)),
        Command::NetworkPolicy(command) => report("network-policy", network_policy::main(command)),
        Command::Sandbox(command) => cli_sandbox::main(command).unwrap_or_else(|err| {
            eprintln!("sandboxd sandbox: {err:#}");
            std::process::ExitCode::FAILURE
        }),
        Command::Images(command) => report("images", cli_images::main(command)),
        Command::Registry(command) => report("registry", cli_registry::main(command)),
        Command::Templates(command) => report("templates", cli_templates::main(command)),
        Command::Workspace(command) => report("workspace", cli_workspace::main(command)),
        Command::Audit(args) => report("audit", audit::main(args)),
        Command::Console(command) => report("console", console_link::main(command)),
        Command::Bench(args) => match bench::main(args) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("sandboxd bench: {err:#}");
                std::process::ExitCode::FAILURE
            }
        },
    }
}

/// Exit status of a tool command, printing its error.
fn report(command: &str, result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("sandboxd {command}: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{init, Cli, Command, RunCli, RunOnly};
    use clap::{CommandFactory, Parser};
    use std::ffi::OsString;

    fn line(words: &[&str]) -> Vec<OsString> {
        std::iter::once("sandboxd")
            .chain(words.iter().copied())
            .map(Into::into)
            .collect()
    }

    /// The init's fast read takes exactly what clap takes for the lines the backend
    /// writes, and leaves every other line to clap.
    #[test]
    fn the_inits_fast_read_agrees_with_clap() {
        for words in [
            &["__sandbox-init", "--held", "--sync-fd", "3"][..],
            &["__sandbox-init", "--sync-fd", "3"],
            &["__sandbox-init", "--sync-fd", "2147483647"],
        ] {
            let fast = init::as_spawned(&line(words)).expect("a backend's line is read");
            let Command::SandboxInit(slow) = Cli::try_parse_from(line(words)).unwrap().command
            else {
                panic!("clap read {words:?} as another command");
            };
            assert_eq!(fast, slow, "{words:?}");
        }
        for words in [
            &["__sandbox-init", "--sync-fd", "3", "--held"][..],
            &["__sandbox-init", "--sync-fd=3"],
            &["__sandbox-init", "--sync-fd", "+3"],
            &["__sandbox-init", "--sync-fd", "-1"],
            &["__sandbox-init", "--sync-fd", ""],
            &["__sandbox-init", "--sync-fd", "2147483648"],
            &["__sandbox-init", "--sync-fd", "3", "extra"],
            &["__sandbox-init", "--held"],
            &["__sandbox-init"],
            &["run", "--sync-fd", "3"],
            &[],
        ] {
            assert_eq!(init::as_spawned(&line(words)), None, "{words:?}");
        }
        assert_eq!(init::as_spawned(&[]), None);
    }

    /// What clap made of a line, comparable: the run's arguments it read (by their
    /// `Debug`), or the error it rendered (help and version are errors too) and its kind.
    fn outcome(parsed: Result<String, clap::Error>) -> String {
        parsed.unwrap_or_else(|e| format!("{:?}: {}", e.kind(), e.render()))
    }

    /// A run's line means the same to the run-only tree as to the whole one: the same
    /// arguments, the same help, the same errors in the same words.
    #[test]
    fn the_run_only_tree_reads_run_lines_as_the_whole_tree_does() {
        let lines: &[&[&str]] = &[
            &["run", "--", "/bin/true"],
            &[
                "run",
                "-e",
                "A=1",
                "--network",
                "none",
                "--vcpu",
                "2",
                "--",
                "sh",
                "-c",
                "x",
            ],
            &[
                "run",
                "--isolation",
                "gvisor",
                "--image",
                "python:3.12",
                "--",
                "python3",
            ],
            &["run", "--help"],
            &["run", "-h"],
            &["run", "--version"],
            &["run"],
            &["run", "--bogus", "--", "true"],
            &["run", "--network", "sideways", "--", "true"],
            &["run", "--vcpu", "many", "--", "true"],
        ];
        for words in lines {
            let whole = Cli::try_parse_from(line(words)).map(|cli| match cli.command {
                Command::Run(args) => format!("{args:?}"),
                _ => panic!("{words:?} read as another command"),
            });
            let alone = RunCli::try_parse_from(line(words)).map(|cli| {
                let RunOnly::Run(args) = cli.command;
                format!("{args:?}")
            });
            assert_eq!(outcome(whole), outcome(alone), "{words:?}");
        }
        // Whatever the whole tree gives every subcommand, the run-only one gives the run.
        let top = |mut c: clap::Command| {
            c.build();
            let args: Vec<String> = c.get_arguments().map(|a| format!("{a:?}")).collect();
            (
                args,
                c.is_propagate_version_set(),
                c.get_version().map(str::to_owned),
            )
        };
        assert_eq!(top(Cli::command()), top(RunCli::command()));
        // And the whole tree's list of commands still says what a run is.
        let help = Cli::command().render_help().to_string();
        assert!(
            help.contains("Run one command in a fresh sandbox"),
            "{help}"
        );
    }
}
