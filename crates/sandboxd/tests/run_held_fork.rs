//! A `sandboxd run` forks its held init (`HeldInit::fork`) instead of spawning the
//! binary anew: the forked init must hold and show what an exec'd one does (only its
//! handshake and /dev/null for stdio, the exec'd init's environment and command line,
//! the signal dispositions of a fresh start, handlers of the run's early signal notes
//! included) and nothing of the run's environment, not even in its memory.

mod held_procs;
mod serve_bin;

use held_procs::{children_of, ended, wait_until};
use sandboxd_runtime::linux::HeldInit;
use serve_bin::BIN;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The run pauses with its init held.
const HELD: &str = "run.held=sleep(60000)";

/// A variable of the run's environment the sandbox must not get.
const SECRET_VAR: &str = "SANDBOXD_TEST_HELD_SECRET";

/// Signals 32 and 33, glibc's own (thread cancellation and set*id across threads):
/// their disposition depends on who spawned whom (glibc's `posix_spawn` leaves them
/// ignored in its children when the parent handles them: this test's run has them so,
/// its exec'd held init not), and no program can set them through glibc.
const GLIBC_INTERNAL: u64 = 0b11 << 31;

/// What a held init holds and shows, as /proc tells it.
#[derive(Debug, PartialEq)]
struct Seen {
    /// The command line after the program's path, its arguments joined by spaces.
    args: String,
    environ: String,
    /// Each descriptor and what it points at (sockets without their inode number).
    fds: Vec<(u32, String)>,
    /// `SigBlk`, `SigIgn`, `SigCgt` of /proc/PID/status.
    signals: Vec<String>,
}

fn seen(pid: u32) -> Seen {
    let line = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    let args: Vec<String> = line
        .split(|&b| b == 0)
        .skip(1)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut fds: Vec<(u32, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("its fds")
        .filter_map(|e| {
            let e = e.ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            let target = target.to_string_lossy();
            let kind = target.split_once(":[").map_or(&*target, |(k, _)| k);
            Some((e.file_name().to_str()?.parse().ok()?, kind.to_owned()))
        })
        .collect();
    fds.sort();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    Seen {
        args: args.join(" "),
        environ: String::from_utf8_lossy(
            &std::fs::read(format!("/proc/{pid}/environ")).expect("environ"),
        )
        .into_owned(),
        fds,
        signals: status
            .lines()
            .filter_map(|l| {
                let (name, mask) = l.split_once(":\t")?;
                ["SigBlk", "SigIgn", "SigCgt"].contains(&name).then(|| {
                    let mask = u64::from_str_radix(mask.trim(), 16).expect("a signal mask");
                    format!("{name}: {:016x}", mask & !GLIBC_INTERNAL)
                })
            })
            .collect(),
    }
}

/// Where `pid`'s binary is mapped (the first line of its maps): the same for a
/// process and its fork, different after an exec (address space layout randomization).
fn layout(pid: u32) -> String {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    maps.lines().next().unwrap_or_default().to_owned()
}

/// `pid`'s parent.
fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let ppid = stat
        .rsplit_once(") ")
        .and_then(|(_, r)| r.split(' ').nth(1));
    ppid.and_then(|p| p.parse().ok()).expect("its parent")
}

/// The session `pid` is in.
fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(3)?.parse().ok()
}

/// Waits until `pid` made its own user namespace (it then waits for its begin).
fn waits_for_begin(pid: u32) {
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/user")).ok();
    wait_until("the held init made its namespaces", || {
        ns(&pid.to_string()).is_some_and(|theirs| Some(theirs) != ns("self"))
    });
}

/// Whether `needle` is anywhere in `pid`'s writable memory (stack, heap, data); fails
/// the test when its stack or heap could not be read (a search that saw nothing).
fn in_memory(pid: u32, needle: &[u8]) -> bool {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("mem");
    let (mut found, mut read) = (false, Vec::new());
    for l in maps.lines() {
        let words: Vec<&str> = l.split_whitespace().collect();
        let (Some(range), Some(perms)) = (words.first(), words.get(1)) else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (start, end) = (
            u64::from_str_radix(start, 16).expect("start"),
            u64::from_str_radix(end, 16).expect("end"),
        );
        let mut bytes = vec![0u8; (end - start) as usize];
        if perms.starts_with("rw")
            && mem.seek(SeekFrom::Start(start)).is_ok()
            && mem.read_exact(&mut bytes).is_ok()
        {
            read.extend(words.get(5).map(|name| name.to_string()));
            found |= bytes.windows(needle.len()).any(|w| w == needle);
        }
    }
    for name in ["[stack]", "[heap]"] {
        assert!(
            read.iter().any(|r| r == name),
            "{name} of {pid} unread: {read:?}"
        );
    }
    found
}

/// Whether the kernel randomizes address space layouts (a fork then keeps its parent's
/// layout and an exec gets another).
fn aslr() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/randomize_va_space").is_ok_and(|v| v.trim() != "0")
}

/// A run this test started, paused with its init held: killed with the init's end
/// awaited when dropped (a failing test leaves no run to build a sandbox in a data dir
/// being removed).
struct HeldRun {
    run: Child,
    /// The run's processes, the waiting one first.
    runs: Vec<u32>,
    held: u32,
}

impl Drop for HeldRun {
    fn drop(&mut self) {
        for pid in self.runs.iter().rev() {
            // SAFETY: kill(2) on the run's own processes, which this test started.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        let _ = self.run.wait();
        // Its handshake closed with the run: it ends by itself.
        let start = std::time::Instant::now();
        while !ended(self.held) && start.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// `sandboxd run` paused with its init held (`failpoints` pause it), `env` added to
/// its environment.
fn held_run(data: &Path, wait_cleanup: bool, env: &[(&str, &str)], failpoints: &str) -> HeldRun {
    let mut cmd = Command::new(BIN);
    cmd.arg("run");
    if wait_cleanup {
        cmd.arg("--wait-cleanup");
    }
    let run = cmd
        .args(["--network", "none", "--data-dir"])
        .arg(data)
        .args(["--", "/bin/true"])
        .env_remove("SANDBOXD_DATA_DIR")
        .env("SANDBOXD_FAILPOINTS", failpoints)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the run");
    let mut found = None;
    wait_until("the run holds its init", || {
        // The run's process tree: the held init is the one with an init's line.
        let mut tree = vec![run.id()];
        let mut at = 0;
        while at < tree.len() {
            tree.extend(children_of(tree[at]));
            at += 1;
        }
        // The held init: a session leader with no child (the run's processes are
        // its ancestors), found whatever its command line shows.
        let held = tree
            .iter()
            .copied()
            .skip(1)
            .find(|&p| session_of(p) == Some(p) && children_of(p).is_empty());
        found = held.map(|h| (tree.into_iter().filter(|&p| p != h).collect(), h));
        found.is_some()
    });
    let (runs, held) = found.expect("held init");
    HeldRun { run, runs, held }
}

#[test]
fn a_runs_forked_held_init_holds_and_shows_what_an_execd_one_does() {
    // The exec'd held init (`HeldInit::spawn`), as the backend would spawn it.
    let execd = HeldInit::spawn(Path::new(BIN), &["__sandbox-init".to_string()])
        .expect("spawn a held init");
    let execd_pid = execd.id().expect("its pid");
    waits_for_begin(execd_pid);
    let execd_seen = seen(execd_pid);
    drop(execd);
    assert_eq!(execd_seen.args, "__sandbox-init --held --sync-fd 3");
    // Its descriptors are what a run's process has (every inherited one marked
    // close-on-exec at its start), not this test's (nextest leaves some open).
    let want = Seen {
        fds: [
            (0, "/dev/null"),
            (1, "/dev/null"),
            (2, "/dev/null"),
            (3, "socket"),
        ]
        .map(|(fd, kind)| (fd, kind.to_owned()))
        .to_vec(),
        ..execd_seen
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    for wait_cleanup in [false, true] {
        let secret = format!("held-secret-{}", uuid::Uuid::new_v4().simple());
        let env = [(SECRET_VAR, secret.as_str())];
        let run = held_run(&data, wait_cleanup, &env, HELD);
        let held = run.held;
        waits_for_begin(held);
        let got = seen(held);
        let forked = layout(held) == layout(parent_of(held));
        // Past the first 16 bytes: a freed copy keeps all but those (the allocator's
        // links overwrite them).
        let leaked = in_memory(held, &secret.as_bytes()[16..]);
        drop(run);
        assert!(ended(held), "the held init of a killed run still runs");
        assert!(
            forked || !aslr(),
            "the held init was not forked from the run"
        );
        assert_eq!(got, want, "forked held init (wait-cleanup {wait_cleanup})");
        assert!(
            !leaked,
            "the run's environment is in its held init's memory (wait-cleanup {wait_cleanup})"
        );
    }
}

/// When the run cannot fork its held init (`held.fork`: as with threads, or a kernel
/// without `PR_SET_MM_MAP`) or is told not to (`SANDBOXD_RUN_INIT=exec`), it spawns one
/// (exec'd: a layout of its own); when the forked one dies at once (`held.fork_child`:
/// as when one of its steps fails) the start makes an init another way. Either way the
/// command runs, and nothing is left.
#[test]
fn a_run_whose_held_init_cannot_be_forked_or_dies_at_once_still_runs_its_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let cases = [
        ("exec", ""),
        ("fork", "held.fork=return"),
        ("fork", "held.fork_child=return"),
    ];
    // A look at the held init, the run paused (then killed).
    for (run_init, points) in &cases[..2] {
        let env = [("SANDBOXD_RUN_INIT", *run_init)];
        let run = held_run(&data, true, &env, &format!("{points};{HELD}"));
        waits_for_begin(run.held);
        let (own, parents) = (layout(run.held), layout(parent_of(run.held)));
        let args = seen(run.held).args;
        drop(run);
        assert!(own != parents || !aslr(), "{run_init} {points}: forked");
        assert_eq!(
            args, "__sandbox-init --held --sync-fd 3",
            "{run_init} {points}"
        );
    }
    for (run_init, points) in cases {
        let out = Command::new(BIN)
            .args(["run", "--wait-cleanup", "--network", "none", "--data-dir"])
            .arg(&data)
            .args(["--", "/bin/sh", "-c", "echo ran"])
            .env_remove("SANDBOXD_DATA_DIR")
            .env("SANDBOXD_RUN_INIT", run_init)
            .env("SANDBOXD_FAILPOINTS", points)
            .stdin(Stdio::null())
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{run_init} {points}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "ran\n",
            "{run_init} {points}"
        );
    }
    assert!(
        serve_bin::wait_for_runs(&data).is_empty(),
        "a run left something"
    );
}
