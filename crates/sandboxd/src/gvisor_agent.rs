//! `sandboxd __gvisor-agent`: the agent as PID 1 of a gVisor sandbox, serving on a Unix
//! socket in the directory the backend binds from the host (gVisor's sentry isolates
//! it; there is no handshake, user namespace or root switch to do here).
//!
//! Its socket is a host socket (runsc `--host-uds=create`), which gVisor cannot write
//! into a checkpoint, so the host asks the agent to let go of it first: on SIGUSR2 the
//! agent closes its listener and every connection, checks that no other process holds
//! a socket bound on a host-backed path, and writes the verdict to [`QUIESCED`] in the
//! socket dir (`ok`, or what blocks a checkpoint). On SIGUSR1 (after a restore, or
//! when the host gives up on the checkpoint) it listens again; a repeat of SIGUSR1 while
//! it listens is dropped before its next verdict. Processes, their output
//! rings and the log live on in memory meanwhile.

use clap::Args;
use sandboxd_agent::{Agent, AgentConfig};
use sandboxd_runtime::linux::gvisor::QUIESCED;
use std::path::{Path, PathBuf};
use tokio::signal::unix::{signal, SignalKind};

#[derive(Args)]
pub struct GvisorAgentArgs {
    /// Path of the socket to listen on (inside the sandbox).
    #[arg(long)]
    pub socket: PathBuf,
}

#[derive(Args)]
pub struct HostnameArgs {
    /// The sandbox's new hostname.
    pub name: String,
}

/// `__gvisor-hostname NAME`: a sandbox started from a memory snapshot has the UTS name
/// of the sandbox the snapshot was taken from (gVisor restores it); the backend runs
/// this in it, with `CAP_SYS_ADMIN` (which the agent has not), to give it its own.
pub fn set_hostname(args: HostnameArgs) -> std::process::ExitCode {
    match nix::unistd::sethostname(&args.name) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sethostname {:?}: {e}", args.name);
            std::process::ExitCode::FAILURE
        }
    }
}

pub fn main(args: GvisorAgentArgs) -> std::process::ExitCode {
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .and_then(|rt| rt.block_on(serve(&args.socket)));
    if let Err(e) = result {
        eprintln!("gvisor agent: {e}");
    }
    std::process::ExitCode::FAILURE
}

async fn serve(socket: &Path) -> std::io::Result<()> {
    let mut quiesce = signal(SignalKind::user_defined2())?;
    let mut relisten = signal(SignalKind::user_defined1())?;
    let verdict = socket.with_file_name(QUIESCED);
    let agent = Agent::new(AgentConfig::default());
    loop {
        // A restarted sandbox finds its old socket file (on the host); before a relisten
        // the host removes it (the gofer lets us bind host sockets, not walk to them).
        let _ = std::fs::remove_file(socket);
        let listener = std::os::unix::net::UnixListener::bind(socket).map_err(|e| {
            std::io::Error::new(e.kind(), format!("binding {}: {e}", socket.display()))
        })?;
        listener.set_nonblocking(true)?;
        let _ = std::fs::remove_file(&verdict);
        let listener = tokio::net::UnixListener::from_std(listener)?;
        agent
            .serve_until(listener, async {
                quiesce.recv().await;
            })
            .await;
        let blocking = host_sockets();
        let text = match blocking.is_empty() {
            true => "ok\n".to_string(),
            false => format!(
                "processes listen on Unix sockets on the host-backed filesystem ({}), \
                 which gVisor cannot checkpoint\n",
                blocking.join(", ")
            ),
        };
        // The host sends SIGUSR1 again while a restored sandbox does not accept (one
        // can be lost early in a restore): repeats still pending are stale. Dropped
        // before the verdict, after which the host's next one is meant.
        //
        // No stale one slips past this drain: tokio's signal driver marks every signal
        // delivered so far in the same pass that wakes `quiesce`, so each SIGUSR1
        // delivered before the SIGUSR2 is seen here. A SIGUSR1 delivered later is the
        // host's own give-up (meant), or, if gVisor ever delivered a restore's repeat
        // only after a whole later quiesce began (not seen), the agent would listen
        // again after `ok` and that checkpoint would fail on its socket; the host's
        // verdict could then carry a generation number (not done: unobserved).
        while let Ok(Some(())) =
            tokio::time::timeout(std::time::Duration::ZERO, relisten.recv()).await
        {}
        std::fs::write(&verdict, text)?;
        relisten.recv().await;
    }
}

/// Paths of Unix sockets bound on host-backed (gofer, `9p`) mounts: runsc made them
/// host sockets, and a checkpoint that meets one fails and ends the sandbox.
fn host_sockets() -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mounts: Vec<(&str, &str)> = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let _source = f.next()?;
            Some((f.next()?, f.next()?))
        })
        .collect();
    let on_host = |path: &str| {
        mounts
            .iter()
            .filter(|(point, _)| {
                path.strip_prefix(point.trim_end_matches('/'))
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .max_by_key(|(point, _)| point.len())
            .is_some_and(|(_, fstype)| *fstype == "9p")
    };
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let mut paths: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter(|p| p.starts_with('/') && on_host(p))
        .map(str::to_string)
        .collect();
    paths.sort();
    paths.dedup();
    paths
}
