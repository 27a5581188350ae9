//! Running `runsc` with the backend's global flags: the ptrace platform, no network
//! (or, with egress, gVisor's own stack over the sandbox's netns), host
//! Unix sockets the sandbox creates (the agent's), no cgroups of its own, no overlay
//! of its own (writes reach the host overlay's upper dir, which captures copy), and,
//! when this runsc has it, `--net-disconnect-ok` (see [`super::features`]).

use super::features::{Features, NET_DISCONNECT_OK};
use crate::RuntimeError;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// How to run `runsc` and where it keeps its state.
#[derive(Debug, Clone)]
pub struct Runsc {
    /// The `runsc` binary.
    pub exe: PathBuf,
    /// Its `--root` (container state files).
    pub root: PathBuf,
    /// What it supports (read once, when the tier opens).
    pub features: Features,
}

/// The variable naming the `runsc` binary to use instead of the one on `PATH`.
pub const RUNSC_VAR: &str = "SANDBOXD_RUNSC";

/// Finds `runsc`: the file `SANDBOXD_RUNSC` names when set (none if it is missing),
/// else on `PATH` (the Debian package puts it in /usr/bin).
pub fn find() -> Option<PathBuf> {
    if let Some(exe) = std::env::var_os(RUNSC_VAR) {
        let exe = PathBuf::from(exe);
        return exe.is_file().then_some(exe);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join("runsc"))
        .find(|p| p.is_file())
}

/// Why the gVisor tier cannot run here when [`find`] finds no `runsc`.
pub fn missing_reason() -> String {
    match std::env::var_os(RUNSC_VAR) {
        Some(exe) => format!(
            "the gVisor tier needs runsc, and {RUNSC_VAR} names {}, which is no file",
            Path::new(&exe).display()
        ),
        None => "the gVisor tier needs runsc, which is not on PATH (apt-get install runsc)".into(),
    }
}

impl Runsc {
    /// A `runsc` command with the global flags, `args` after them.
    pub fn command(&self, log: Option<&Path>, args: &[&str]) -> Command {
        self.command_with_network(log, "none", args)
    }

    /// [`Runsc::command`] with `--network=<network>`: `sandbox` makes the sentry's own
    /// network stack take over the interfaces, addresses and routes of the network
    /// namespace the OCI spec names (it matters to `create`, `start` and `restore`:
    /// this runsc sets the sandbox's network up when it starts or restores the root
    /// container, from what the namespace holds then).
    pub fn command_with_network(
        &self,
        log: Option<&Path>,
        network: &str,
        args: &[&str],
    ) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.arg(format!("--root={}", self.root.display()))
            .args([
                "--platform=ptrace",
                &format!("--network={network}"),
                "--host-uds=create",
                "--ignore-cgroups",
                "--overlay2=none",
                // Writes go through to the host file at once, so a capture of the
                // upper dir sees them (the default caches them in the sentry).
                "--file-access=shared",
            ])
            .stdin(Stdio::null());
        // A checkpoint resets the link's open TCP connections instead of failing (and
        // ending the sandbox) on them. Given to every command: `create`/`start`/
        // `restore` set the link's capabilities, and the flags must agree across them.
        if self.features.net_disconnect_ok {
            cmd.arg(format!("--{NET_DISCONNECT_OK}"));
        }
        if let Some(log) = log {
            cmd.arg(format!("--log={}", log.display()));
        }
        // For debugging runsc itself: its (and the sentry's) debug logs, one file per
        // command, in this dir (runsc's `--debug-log` naming).
        if let Some(dir) = std::env::var_os("SANDBOXD_RUNSC_DEBUG_LOG") {
            cmd.arg("--debug")
                .arg(format!("--debug-log={}/", Path::new(&dir).display()));
        }
        cmd.args(args);
        cmd
    }

    /// Runs `args` to completion; an error carries runsc's stderr.
    pub fn run(&self, log: Option<&Path>, args: &[&str]) -> Result<Output, RuntimeError> {
        self.run_with_network(log, "none", args)
    }

    /// [`Runsc::run`] with `--network=<network>` (see [`Runsc::command_with_network`]).
    pub fn run_with_network(
        &self,
        log: Option<&Path>,
        network: &str,
        args: &[&str],
    ) -> Result<Output, RuntimeError> {
        let output = self
            .command_with_network(log, network, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| RuntimeError::AgentStart(format!("running runsc: {e}")))?;
        if !output.status.success() {
            return Err(RuntimeError::AgentStart(format!(
                "runsc {} failed ({}): {}",
                args.first().copied().unwrap_or_default(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(output)
    }

    /// The container's status as runsc reports it (`created`, `running`, `paused`,
    /// `stopped`), or `None` when runsc does not know it.
    pub fn status(&self, id: &str) -> Option<String> {
        let output = self.run(None, &["state", id]).ok()?;
        let state: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
        state["status"].as_str().map(str::to_string)
    }

    /// Removes runsc's state of container `id` (killing what is left of it); unknown
    /// ids are fine.
    pub fn delete(&self, id: &str) {
        self.end_own_processes(id);
        let _ = self.run(None, &["delete", "--force", id]);
    }

    /// Kills and reaps the sentry and gofer of container `id` when they are this
    /// process's children (it started them, or is their subreaper): `delete --force`
    /// of runsc 20240729 kills them, then waits until they are gone, which a zombie
    /// child never is (seen: a reconcile of sandboxes this process started hung there).
    /// Their pids come from runsc's state file; a pid that is not our child is left
    /// alone (it may be reused).
    fn end_own_processes(&self, id: &str) {
        let me = std::process::id() as i32;
        let ours: Vec<i32> = self
            .state_files(id)
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "state"))
            .filter_map(|f| std::fs::read(f).ok())
            .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .flat_map(|state| [state["goferPid"].as_i64(), state["sandbox"]["pid"].as_i64()])
            .flatten()
            .filter_map(|pid| i32::try_from(pid).ok())
            .filter(|&pid| pid > 0 && parent_of(pid) == Some(me))
            .collect();
        for &pid in &ours {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        super::destroy::reap(&ours);
    }

    /// Every file runsc keeps under its root for container `id`.
    pub fn state_files(&self, id: &str) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(id))
            .map(|e| e.path())
            .collect()
    }
}

/// The parent pid of `pid` (from `/proc/<pid>/stat`), or `None` when it is gone.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parens; it ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}
