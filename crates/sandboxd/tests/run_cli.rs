//! `sandboxd run` goes through the engine: the server's defaults apply (its default
//! disk size is a real limit), the sandbox is recorded and ended in the server's store,
//! and the exit status is the command's, 128+N for signal N. It returns once the
//! command is done, with all its output; the teardown goes on in its worker, and what a
//! worker killed before finishing (or a run killed outright) leaves, the next run ends.

mod serve_bin;

use sandboxd_store::{SandboxFilter, SqliteStore, Store};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `sandboxd run --network none --data-dir DATA -- argv…` with `env` set.
fn run(data: &Path, env: &[(&str, &str)], argv: &[&str]) -> Output {
    let mut cmd = Command::new(serve_bin::BIN);
    cmd.args(["run", "--network", "none", "--data-dir"])
        .arg(data)
        .arg("--")
        .args(argv)
        .env_remove("SANDBOXD_DATA_DIR")
        // A shared test host's free space must not refuse the default disk.
        .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run sandboxd run")
}

#[test]
fn the_servers_default_disk_size_limits_a_run() {
    let data = tempfile::tempdir().expect("tempdir");
    let env = [("SANDBOXD_DISK_MB_PER_SANDBOX", "32")];
    let fill = "dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1; echo dd=$?";
    let out = run(data.path(), &env, &["/bin/sh", "-c", fill]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("No space left on device") && !stdout.contains("dd=0"),
        "64 MiB fit a 32 MiB disk: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The detached teardown ends before the temp dir goes (it left `disk-trash` behind).
    assert!(serve_bin::wait_for_runs(data.path()).is_empty());
}

#[test]
fn a_run_is_recorded_ended_and_exits_with_the_commands_status() {
    let data = tempfile::tempdir().expect("tempdir");
    let out = run(
        data.path(),
        &[],
        &["/bin/sh", "-c", "echo out; echo err >&2; exit 3"],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"out\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("err\n"));

    let killed = run(data.path(), &[], &["/bin/sh", "-c", "kill -9 $$"]);
    assert_eq!(killed.status.code(), Some(137), "SIGKILL is 128+9");
    let bare = run(data.path(), &[], &["true"]);
    assert_eq!(bare.status.code(), Some(0), "a bare name is found in PATH");

    assert_eq!(
        serve_bin::wait_for_runs(data.path()),
        Vec::<std::path::PathBuf>::new()
    );
    let store = SqliteStore::open(data.path().join("sandboxd.db")).expect("the run's store");
    let runs = store
        .list_sandboxes("default", SandboxFilter::default(), 10, None)
        .expect("list");
    assert_eq!(
        runs.len(),
        3,
        "each run is a sandbox of the default workspace"
    );
    assert!(
        runs.iter().all(|sb| sb.status == "TERMINATED"),
        "{:?}",
        runs.iter().map(|sb| &sb.status).collect::<Vec<_>>()
    );
    assert!(
        runs.iter()
            .all(|sb| sb.disk_mb == Some(sandboxd_engine::Limits::default().disk_mb_per_sandbox)),
        "the server's default disk size: {:?}",
        runs.iter().map(|sb| sb.disk_mb).collect::<Vec<_>>()
    );
}

/// The files in the data dir's disk trash.
fn trash(data: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(data.join("disk-trash")).map_or(Vec::new(), |d| {
        d.filter_map(|e| e.ok()).map(|e| e.path()).collect()
    })
}

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

#[test]
fn a_run_detaches_its_disk_and_the_next_run_removes_what_earlier_ones_left() {
    let data = tempfile::tempdir().expect("tempdir");
    let data = data.path().canonicalize().expect("canonical");
    let first = run(&data, &[], &["/bin/true"]);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    assert!(serve_bin::wait_for_runs(&data).is_empty());
    assert_eq!(
        loops_under(&data),
        Vec::<String>::new(),
        "loop device detached"
    );
    // What a process killed before it removed its images leaves behind.
    std::fs::create_dir_all(data.join("disk-trash")).expect("trash dir");
    let killed = data.join("disk-trash/left-by-a-killed-run.img");
    std::fs::write(&killed, b"image").expect("leftover");
    let left: Vec<_> = trash(&data);
    assert!(left.contains(&killed), "{left:?}");

    let second = run(&data, &[], &["/bin/true"]);
    assert_eq!(second.status.code(), Some(0), "{second:?}");
    assert!(serve_bin::wait_for_runs(&data).is_empty());
    assert_eq!(
        loops_under(&data),
        Vec::<String>::new(),
        "loop device detached"
    );
    let now = trash(&data);
    assert!(
        left.iter().all(|f| !now.contains(f)),
        "the next run removes earlier leftovers: {left:?} still in {now:?}"
    );
    assert!(
        now.len() <= 1,
        "at most the last run's image waits: {now:?}"
    );
    let images: Vec<_> = std::fs::read_dir(data.join("sandboxes"))
        .expect("sandboxes")
        .filter_map(|e| e.ok())
        .collect();
    assert!(images.is_empty(), "no sandbox dir remains: {images:?}");
}

/// Regression: a run that made the sandboxes' parent cgroup left it behind, empty, once
/// done (a server removes the one it made when it stops; a run never did). Here the
/// parent is one of the test's own (`SANDBOXD_CGROUP_PARENT`).
#[test]
fn a_run_removes_the_parent_cgroup_it_made_once_done() {
    let data = tempfile::tempdir().expect("tempdir");
    let parent = format!(
        "sandboxd-test-run-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let dirs = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir("/sys/fs/cgroup")
            .expect("cgroup root")
            .flatten()
            .map(|c| c.path().join(&parent))
            .filter(|d| d.exists())
            .collect()
    };
    assert_eq!(dirs(), Vec::<std::path::PathBuf>::new(), "a fresh name");
    let out = run(
        data.path(),
        &[("SANDBOXD_CGROUP_PARENT", parent.as_str())],
        &["/bin/true"],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(serve_bin::wait_for_runs(data.path()).is_empty());
    let left = dirs();
    for d in &left {
        let _ = std::fs::remove_dir(d);
    }
    assert_eq!(
        left,
        Vec::<std::path::PathBuf>::new(),
        "parent cgroups left"
    );
}

/// The dir holding the sandboxes' state dirs is marked the top of directory hierarchies
/// (`chattr +T`) on an ext4 data dir, so that ext4 spreads each sandbox's dir and files
/// over its block groups instead of walking past every inode the last minute's
/// sandboxes freed (runtime `spread_dirs`); the data dir itself keeps its attributes. On
/// another filesystem the run works all the same.
#[test]
fn a_runs_data_dir_marks_the_sandboxes_dir_for_spreading_on_ext4() {
    let data = tempfile::tempdir().expect("tempdir");
    let out = run(data.path(), &[], &["/bin/true"]);
    assert!(out.status.success(), "{out:?}");
    assert!(serve_bin::wait_for_runs(data.path()).is_empty());
    let on_ext4 = nix::sys::statfs::statfs(data.path())
        .expect("statfs of the temp dir")
        .filesystem_type()
        == nix::sys::statfs::EXT4_SUPER_MAGIC;
    if !on_ext4 {
        return;
    }
    let attrs = |dir: &Path| {
        let out = Command::new("lsattr")
            .arg("-d")
            .arg(dir)
            .output()
            .expect("lsattr");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let sandboxes = attrs(&data.path().join("sandboxes"));
    assert!(sandboxes.contains('T'), "sandboxes/ is {sandboxes}");
    assert!(!attrs(data.path()).contains('T'));
}

/// A parent cgroup name that is no plain name (a path out of the hierarchy) is refused
/// with a clear error, before anything is made.
#[test]
fn a_cgroup_parent_that_is_a_path_is_refused() {
    let data = tempfile::tempdir().expect("tempdir");
    let out = run(
        data.path(),
        &[("SANDBOXD_CGROUP_PARENT", "../escape")],
        &["/bin/true"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("SANDBOXD_CGROUP_PARENT"), "{stderr}");
}

/// After each run (its teardown waited for), the database's WAL is short: the next run
/// opens the database alone and reads every frame of it before its first statement.
/// The run trims it before its destroy (so that the next run's create does not write
/// an emptied WAL's header anew, with two fsyncs): the destroy's frames follow.
#[test]
fn runs_keep_the_databases_log_short() {
    /// The store's bound (64 frames of 4096-byte pages and their 24-byte headers), and
    /// room for a destroy's frames after it.
    const MAX_WAL_BYTES: u64 = (64 + 32) * (4096 + 24);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    for n in 0..4 {
        let out = Command::new(serve_bin::BIN)
            .args(["run", "--wait-cleanup", "--network", "none", "--data-dir"])
            .arg(&data)
            .args(["--", "/bin/true"])
            .env_remove("SANDBOXD_DATA_DIR")
            .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
            .stdin(Stdio::null())
            .output()
            .expect("run sandboxd run");
        assert!(out.status.success(), "run {n}: {out:?}");
        let wal = std::fs::metadata(data.join("sandboxd.db-wal")).map_or(0, |m| m.len());
        assert!(
            wal <= MAX_WAL_BYTES,
            "after run {n} the WAL holds {wal} bytes ({} frames)",
            wal / (4096 + 24)
        );
        assert!(
            wal > 0,
            "after run {n} the WAL is empty: the next run's create syncs it"
        );
    }
}
