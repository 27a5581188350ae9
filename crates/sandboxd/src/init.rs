//! `sandboxd __sandbox-init`: sets up a new sandbox from inside, then becomes its agent.

use clap::Args;
use sandboxd_agent::AgentConfig;

#[derive(Args, Debug, PartialEq)]
pub struct InitArgs {
    /// File descriptor of the handshake socket shared with the backend.
    #[arg(long)]
    pub sync_fd: i32,
    /// Spawned ahead of its sandbox: make the early namespaces, then wait for the
    /// backend's `begin` (which brings the log and the cgroups to join).
    #[arg(long)]
    pub held: bool,
}

/// The init's arguments read straight from `args` (the whole command line) when they
/// are exactly what the backend writes (`__sandbox-init [--held] --sync-fd N`), so that
/// the init, on the start's path, does not build clap's tree of every subcommand
/// (~0.3 ms and ~90 page faults here); `None` for any other line, which clap parses.
pub fn as_spawned(args: &[std::ffi::OsString]) -> Option<InitArgs> {
    let words: Vec<&str> = args
        .get(1..)?
        .iter()
        .map(|a| a.to_str())
        .collect::<Option<_>>()?;
    let (held, fd) = match words.as_slice() {
        ["__sandbox-init", "--held", "--sync-fd", fd] => (true, fd),
        ["__sandbox-init", "--sync-fd", fd] => (false, fd),
        _ => return None,
    };
    // Digits only: clap's i32 parse would also take a sign, which the backend never writes.
    if fd.is_empty() || !fd.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(InitArgs {
        sync_fd: fd.parse().ok()?,
        held,
    })
}

pub fn main(args: InitArgs) -> std::process::ExitCode {
    let mut made = None;
    if args.held {
        match sandboxd_runtime::linux::init::wait_for_begin(args.sync_fd) {
            Ok(Some(namespaces)) => made = Some(namespaces),
            // Not needed after all (the run took another way, or ended).
            Ok(None) => return std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sandbox init failed: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    // The confinement (capability plan, compiled seccomp programs) is prepared while the
    // backend mounts the root, as root of the new user namespace with its full set.
    let (entered, prepared) =
        match sandboxd_runtime::linux::init::enter(args.sync_fd, made, sandboxd_confine::prepare) {
            Ok(entered) => entered,
            Err(e) => {
                eprintln!("sandbox init failed: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            let reason = format!("preparing command confinement: {e}");
            eprintln!("sandbox init failed: {reason}");
            entered.fail(&reason);
            return std::process::ExitCode::FAILURE;
        }
    };
    // The agent confines itself (no_new_privs, capabilities, seccomp) before it serves,
    // and every command inherits that: loading the seccomp program once instead of in
    // every child saves about a millisecond and a half per command. Commands only get
    // their OOM score reset (the agent keeps -1000).
    //
    // It does so right after telling the backend it is ready: loading the programs
    // takes about a millisecond here (the kernel evaluates them for every syscall
    // number to build its cache), which then overlaps the server's answer to the
    // create and the client's first request. Nothing runs in the sandbox before: the
    // listener only accepts once the agent serves, after the confinement is in place.
    let (listener, _config, parked, tether) = match entered.ready() {
        Ok(ready) => ready,
        Err(e) => {
            eprintln!("sandbox init failed: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Err(e) = prepared.apply() {
        // The backend is gone from the handshake: the agent's exit is the report (the
        // server ends a sandbox whose agent died), with this line in the init log.
        eprintln!("sandbox init failed: confining the agent: {e}");
        return std::process::ExitCode::FAILURE;
    }
    // A warm init serves ahead of its sandbox, and ends if the server goes away first;
    // a run's early init, tethered, also once its run is gone after the start.
    if let Some(parked) = parked {
        std::thread::spawn(move || match parked.wait_for_start() {
            Ok(None) => {}
            Ok(Some(tether)) => {
                tether.wait_until_gone();
                std::process::exit(0);
            }
            Err(_) => std::process::exit(0),
        });
    }
    // A tethered sandbox (a one-shot run's) ends with the process that started it:
    // PID 1's exit makes the kernel kill every other process of the sandbox.
    if let Some(tether) = tether {
        std::thread::spawn(move || {
            tether.wait_until_gone();
            std::process::exit(0);
        });
    }
    // Every command's OOM score goes back to 0 (`sandboxd_agent`'s command defaults
    // before its exec where it can, the agent after it where it cannot).
    sandboxd_agent::run_blocking(listener, AgentConfig::default())
}
