//! A one-shot runtime's early init (`with_early_init`, what `sandboxd run` uses): made
//! at the runtime's open (for the built-in image: parked in its root, its agent serving
//! before the start; for another image: without a root), taken by the start of the same
//! disk size (the sandbox then starts warm and works), not taken by another size and
//! then removed with everything it made; a parked one's PID 1 tethered to the runtime's
//! process once started; and a `sandboxd run` killed with SIGKILL while its early init waits (the
//! create held before its start) leaves nothing once the next run has opened the data
//! dir: no entry dir, process, mount, loop device, cgroup or id slot; a run's sweep of
//! earlier runs leaves its own early init's make alone.

mod common;
mod serve_bin;

use common::{mounts_under, sh_ok, slot_leases, warm_keys};
use sandboxd_runtime::Runtime;
use serve_bin::BIN;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Loop devices whose backing file lies under `data`.
fn loops_under(data: &Path) -> Vec<String> {
    let data = data.display().to_string();
    std::fs::read_dir("/sys/block")
        .expect("/sys/block")
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("loop/backing_file"))
                .is_ok_and(|f| f.starts_with(&data))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The cgroup dirs named `name` under any hierarchy's `parent`.
fn cgroups_named(parent: &str, name: &str) -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join(parent).join(name))
                .filter(|p| p.exists())
                .collect()
        })
        .unwrap_or_default()
}

/// Processes with a file open under `dir` (an entry's init holds its log there).
fn processes_holding(dir: &Path) -> Vec<i32> {
    let dir = dir.display().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.filter_map(|f| f.ok())
                    .filter_map(|f| std::fs::read_link(f.path()).ok())
                    .any(|target| target.display().to_string().starts_with(&dir))
            })
        })
        .collect()
}

/// Whether `pid` is PID 1 of a PID namespace of its own (a sandbox's init, not the
/// intermediate that forks it).
fn is_pid_1_of_its_namespace(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .is_some_and(|ids| ids.split_whitespace().count() > 1 && ids.ends_with("\t1"))
    })
}

fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().canonicalize().expect("canonical");
    (dir, path)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(120), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Nothing of a sandbox or an early init is left under `data`: no mount, loop device
/// or id slot.
fn assert_no_mounts_loops_or_slots(data: &Path) {
    assert_eq!(mounts_under(data), Vec::<String>::new(), "mounts left");
    assert_eq!(loops_under(data), Vec::<String>::new(), "loop devices left");
    assert_eq!(slot_leases(data), Vec::<String>::new(), "id slots left");
}

/// Waits until an early init of `data` is parked with its agent serving.
fn wait_for_early_agent(data: &Path) {
    wait_until("the early init's agent serves", || {
        warm_keys(data).iter().any(|key| {
            let socket = data
                .join("sandboxes")
                .join(format!(".warm-{key}/agent.sock"));
            std::os::unix::net::UnixStream::connect(socket).is_ok()
        })
    });
}

#[test]
fn a_start_takes_the_early_init_and_one_of_another_size_is_removed_untaken() {
    let (_dir, data) = data_dir();
    let _cleanup = common::runtime(&data);
    let spec = common::spec("default");
    let tethers = sandboxd_runtime::linux::Tethers::new();
    let rt = common::raw_runtime(&data)
        .with_tethers(tethers.clone())
        .with_early_init(spec.disk_mb, "default", None);
    // Parked in the built-in image's root: its agent serves before any start.
    wait_for_early_agent(&data);
    let taken = rt.start(&spec).expect("start");
    assert!(taken.warm, "the start did not take the early init");
    assert_eq!(warm_keys(&data), Vec::<String>::new(), "an entry is left");
    assert_eq!(sh_ok(&taken, "echo ok; hostname"), "ok\nbox\n");
    rt.destroy(&taken).expect("destroy");
    rt.discard_early_init();
    tethers.finish_released();

    // Made for another image: no root of its own, the start mounts the one it asks for.
    let rootless = common::raw_runtime(&data)
        .with_tethers(tethers.clone())
        .with_early_init(spec.disk_mb, "another-image", None);
    let spec = common::spec("default");
    let taken = rootless.start(&spec).expect("start");
    assert!(taken.warm, "the start did not take the rootless early init");
    assert_eq!(sh_ok(&taken, "echo ok; hostname"), "ok\nbox\n");
    rootless.destroy(&taken).expect("destroy");
    rootless.discard_early_init();
    tethers.finish_released();

    // Made for a 64 MiB disk: a start without one does not take it.
    let other = common::raw_runtime(&data).with_early_init(spec.disk_mb + 64, "default", None);
    let spec = common::spec("default");
    let cold = other.start(&spec).expect("start");
    assert!(
        !cold.warm,
        "a start took an early init of another disk size"
    );
    other.destroy(&cold).expect("destroy");
    let keys = warm_keys(&data);
    assert_eq!(keys.len(), 1, "the untaken early init: {keys:?}");
    let entry = data.join("sandboxes").join(format!(".warm-{}", keys[0]));
    other.discard_early_init();
    assert_eq!(warm_keys(&data), Vec::<String>::new(), "its dir is left");
    assert_eq!(
        processes_holding(&entry),
        Vec::<i32>::new(),
        "its init is left"
    );
    assert_no_mounts_loops_or_slots(&data);
    assert_eq!(cgroups_under(&other), Vec::<PathBuf>::new(), "cgroups left");
}

/// The cgroup dirs under the runtime's own parent, in every hierarchy.
fn cgroups_under(rt: &sandboxd_runtime::linux::LinuxRuntime) -> Vec<PathBuf> {
    let parent = rt.cgroups().dirs(uuid::Uuid::nil());
    parent
        .iter()
        .filter_map(|d| d.parent())
        .flat_map(|dir| {
            std::fs::read_dir(dir)
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.path())
                        .filter(|p| p.is_dir())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// This process's children that are zombies (ended, never reaped).
fn zombie_children() -> Vec<i32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|t| {
                let field = |name: &str| {
                    t.lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim().to_owned())
                };
                field("PPid:").as_deref() == Some(me.as_str())
                    && field("State:").is_some_and(|s| s.starts_with('Z'))
            })
        })
        .collect()
}

/// Regression: a start that took the early init and then failed to write its layer pin
/// (a full disk, an I/O error) dropped the taken entry without ending it: its init was
/// left a zombie and its cgroups, still named by the entry's key, stayed for ever
/// (empty `sandboxd/<key>` dirs in every hierarchy, what a CI run found left over).
#[test]
fn a_start_failing_at_its_layer_pin_ends_the_early_init_it_took() {
    let scenario = fail::FailScenario::setup();
    let (_dir, data) = data_dir();
    let _cleanup = common::runtime(&data);
    let spec = common::spec("default");
    let tethers = sandboxd_runtime::linux::Tethers::new();
    let rt = common::raw_runtime(&data)
        .with_tethers(tethers.clone())
        .with_early_init(spec.disk_mb, "default", None);
    fail::cfg("start.pin", "1*return").expect("failpoint");
    assert!(
        rt.start(&spec).is_err(),
        "the start did not fail at its pin"
    );
    rt.discard_early_init();
    tethers.finish_released();
    assert_eq!(warm_keys(&data), Vec::<String>::new(), "an entry is left");
    assert_eq!(cgroups_under(&rt), Vec::<PathBuf>::new(), "cgroups left");
    assert_eq!(
        zombie_children(),
        Vec::<i32>::new(),
        "an init left unreaped"
    );
    assert_eq!(mounts_under(&data), Vec::<String>::new(), "mounts left");
    assert_eq!(slot_leases(&data), Vec::<String>::new(), "id slots left");
    scenario.teardown();
}

/// A run sweeps the sandboxes and warm entries of dead earlier runs beside its create;
/// that sweep leaves an entry dir that is still empty to the next runtime's open. Before,
/// it took the run's own early init's dir in its first instant (made, its owner mark not
/// yet in it: the run then made another), in about two runs in five back to back; here
/// the owner mark's write is held 300 ms (`warm.owner`) to make that instant long.
#[test]
fn a_runs_sweep_of_earlier_runs_leaves_its_own_early_init_alone() {
    let (_dir, data) = data_dir();
    let run = |failpoints: &str| {
        Command::new(BIN)
            .args(["run", "--network", "none", "--data-dir"])
            .arg(&data)
            .args(["--", "/bin/true"])
            .env_remove("SANDBOXD_DATA_DIR")
            .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
            .env("SANDBOXD_FAILPOINTS", failpoints)
            .env("RUST_LOG", "sandboxd_runtime=debug")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .expect("run")
    };
    // A first run makes the disk template (its first make formats it).
    assert!(run("").status.success());
    let began = Instant::now();
    let held = run("warm.owner=sleep(300)");
    let log = String::from_utf8_lossy(&held.stderr);
    assert!(held.status.success(), "{log}");
    // The hold was met, and the early init made and taken (the log is the runtime's).
    assert!(began.elapsed() >= Duration::from_millis(300), "not held");
    assert!(
        log.contains("warm make") && log.contains("phase=\"parked\""),
        "{log}"
    );
    assert!(
        log.contains("phase=\"ready (parked)\""),
        "the early init was not taken: {log}"
    );
    assert!(
        !log.contains("a sweep took a new warm init's dir"),
        "the run's sweep took its early init's dir: {log}"
    );
    assert!(serve_bin::wait_for_runs(&data).is_empty());
    assert_eq!(warm_keys(&data), Vec::<String>::new(), "an entry is left");
    assert_no_mounts_loops_or_slots(&data);
}

#[test]
fn a_run_killed_while_its_early_init_waits_leaves_nothing_after_the_next_run() {
    let (_dir, data) = data_dir();
    let run = |failpoints: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--network", "none", "--data-dir"])
            .arg(&data)
            .args(["--", "/bin/true"])
            .env_remove("SANDBOXD_DATA_DIR")
            .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
            .stdin(Stdio::null());
        if let Some(points) = failpoints {
            cmd.env("SANDBOXD_FAILPOINTS", points);
        }
        cmd
    };
    // A first run makes the disk template (its first make formats it).
    assert!(run(None).status().expect("run").success());
    assert!(serve_bin::wait_for_runs(&data).is_empty());

    // The create held before its start: the early init is made and waits.
    let mut held = run(Some("store.insert_sandbox=sleep(60000)"))
        .spawn()
        .expect("spawn the held run");
    wait_until("the early init's disk is mounted", || {
        warm_keys(&data).len() == 1 && !mounts_under(&data).is_empty()
    });
    let key = warm_keys(&data).remove(0);
    let entry = data.join("sandboxes").join(format!(".warm-{key}"));
    // The held run's worker: the child the waiting process forked at its start.
    let workers: Vec<i32> = std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("PPid:"))
                    .is_some_and(|p| p.trim() == held.id().to_string())
            })
        })
        .collect();
    assert_eq!(workers.len(), 1, "the held run's worker");
    for pid in [workers[0], held.id() as i32] {
        // SAFETY: kill(2) on processes this test started (the run and its worker).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let _ = held.wait();
    assert_eq!(
        warm_keys(&data),
        vec![key.clone()],
        "the dead run's entry is swept early"
    );

    // The next run opens the data dir: the dead run's entry goes with all it made.
    assert!(run(None).status().expect("run").success());
    assert!(serve_bin::wait_for_runs(&data).is_empty());
    assert_eq!(warm_keys(&data), Vec::<String>::new(), "the entry is left");
    wait_until("the dead run's init ends", || {
        processes_holding(&entry).is_empty()
    });
    assert_no_mounts_loops_or_slots(&data);
    assert_eq!(
        cgroups_named("sandboxd", &key),
        Vec::<PathBuf>::new(),
        "cgroups left"
    );
}

/// Tethers come before the early init, or the init begun untethered would outlive a
/// killed run: the other order is refused at once (the runtime, dropped while that
/// refusal unwinds, removes its early init: nothing is left behind).
#[test]
#[should_panic(expected = "with_tethers after with_early_init")]
fn tethers_after_the_early_init_are_refused() {
    let (_dir, data) = data_dir();
    let _cleanup = common::runtime(&data);
    let spec = common::spec("default");
    let _rt = common::raw_runtime(&data)
        .with_early_init(spec.disk_mb, "default", None)
        .with_tethers(sandboxd_runtime::linux::Tethers::new());
}

/// A run that fails before its start drops its runtime with the early init untaken:
/// that init and its cgroups go, and then the parent cgroup the runtime made (it was
/// removed first, while the init was still in it, and stayed behind empty).
#[test]
fn a_runtime_dropped_with_its_early_init_untaken_leaves_no_parent_cgroup() {
    let (_dir, data) = data_dir();
    let spec = common::spec("default");
    let parent = common::own_cgroups::parent_for(&data);
    // The only runtime over the data dir: it makes the parent (and so removes it).
    let rt = common::raw_runtime(&data).with_early_init(spec.disk_mb, "default", None);
    wait_until("the early init is made", || !warm_keys(&data).is_empty());
    let dirs: Vec<PathBuf> = ["memory", "pids", "cpu"]
        .iter()
        .map(|c| Path::new("/sys/fs/cgroup").join(c).join(&parent))
        .collect();
    assert!(dirs.iter().all(|d| d.is_dir()), "the parent: {dirs:?}");
    drop(rt);
    assert_eq!(warm_keys(&data), Vec::<String>::new(), "an entry is left");
    let left: Vec<&PathBuf> = dirs.iter().filter(|d| d.exists()).collect();
    assert!(left.is_empty(), "parent cgroups left: {left:?}");
}

/// An early init that died after its make (killed, out of memory) is not handed to the
/// start, which goes on cold and works; what the dead one made is removed.
#[test]
fn a_start_goes_cold_when_the_early_init_died_parked() {
    let (_dir, data) = data_dir();
    let _cleanup = common::runtime(&data);
    let spec = common::spec("default");
    let rt = common::raw_runtime(&data).with_early_init(spec.disk_mb, "default", None);
    wait_for_early_agent(&data);
    let key = warm_keys(&data).remove(0);
    let entry = data.join("sandboxes").join(format!(".warm-{key}"));
    // The agent's socket takes connections from its bind in the intermediate, before
    // PID 1 is forked: parked means PID 1 alone is left holding the entry (a listing
    // of /proc taken in the fork's instant can hold neither).
    let mut parked = Vec::new();
    wait_until("the early init's PID 1 alone is left", || {
        parked = processes_holding(&entry);
        matches!(parked[..], [pid] if is_pid_1_of_its_namespace(pid))
    });
    let pid1 = parked[0];
    // SAFETY: kill(2) on the PID 1 this test's runtime started.
    unsafe { libc::kill(pid1, libc::SIGKILL) };
    // Dead as the runtime sees it: a zombie or gone. (Its files are closed before its
    // namespaces go, and both before it is a zombie: a start in between takes a dying
    // init, whose namespaces it then cannot open.)
    wait_until("the early init is dead", || {
        common::stat_fields(pid1)
            .first()
            .is_none_or(|state| state == "Z" || state == "X")
    });
    let cold = rt.start(&spec).expect("a cold start");
    assert!(!cold.warm, "the dead early init was taken");
    assert_eq!(sh_ok(&cold, "echo ok"), "ok\n");
    assert!(!entry.exists(), "the dead init's entry is left");
    rt.destroy(&cold).expect("destroy");
    rt.discard_early_init();
    assert_eq!(warm_keys(&data), Vec::<String>::new(), "an entry is left");
    assert_no_mounts_loops_or_slots(&data);
}

/// Two starts at once (a one-shot runtime makes one, but nothing stops a caller): the
/// early init is claimed by one of them in one step, the other starts cold, both work,
/// and nothing is left after them.
#[test]
fn of_two_starts_at_once_one_takes_the_early_init() {
    let (_dir, data) = data_dir();
    let _cleanup = common::runtime(&data);
    let spec = common::spec("default");
    let rt = common::raw_runtime(&data).with_early_init(spec.disk_mb, "default", None);
    let started: Vec<_> = std::thread::scope(|s| {
        let starts: Vec<_> = (0..2)
            .map(|_| s.spawn(|| rt.start(&common::spec("default")).expect("start")))
            .collect();
        starts
            .into_iter()
            .map(|t| t.join().expect("join"))
            .collect()
    });
    let warm = started.iter().filter(|h| h.warm).count();
    assert_eq!(warm, 1, "starts that took the early init");
    for handle in &started {
        assert_eq!(sh_ok(handle, "echo ok"), "ok\n");
        rt.destroy(handle).expect("destroy");
    }
    rt.discard_early_init();
    assert_eq!(warm_keys(&data), Vec::<String>::new(), "an entry is left");
    assert_no_mounts_loops_or_slots(&data);
}
