//! No user but root can reach or redirect what sandboxes and images make: a data dir
//! another user owns, or whose chain from `/` another user could rename (their dir
//! above it, a group-writable dir without the sticky bit), is refused at start with
//! nothing made; an ancestor given away after start-up makes captures refuse (the
//! rename-and-replace swap of the outside review gets no setuid file); the database is
//! `0600`; a root `0700` dir right in `/tmp` (root's, sticky) is fine.

mod serve_bin;

use serde_json::json;
use serve_bin::{Server, BIN};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const MASTER: &str = "data-dir-chain-test-master-key-0123456789";

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).expect("chown");
}

/// Runs `script` (`$0` is `arg`) in a shell as uid/gid 65534 with no groups and no
/// capabilities: a local user with no rights.
fn as_nobody(script: &str, arg: &str) -> std::process::Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .args(["--", "/bin/sh", "-c", script, arg])
        .output()
        .expect("setpriv")
}

/// Starts `sandboxd serve` on `data` and reads its log until it listens or exits:
/// `Err(log)` when it exited (with a failure status), `Ok(())` when it listened (then
/// it is stopped).
fn serve_outcome(data: &Path) -> Result<(), String> {
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .env("SANDBOXD_MASTER_KEY", MASTER)
        .env("SANDBOXD_METRICS_LISTEN", "none")
        .env("SANDBOXD_WARM_INITS_START", "0")
        .env("SANDBOXD_WARM_INITS", "0")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().expect("stderr"))
        .lines()
        .map_while(Result::ok)
    {
        eprintln!("[serve] {line}");
        if line.contains("listening on") {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            child.wait().expect("wait");
            return Ok(());
        }
        log.push_str(&line);
        log.push('\n');
    }
    let status = child.wait().expect("wait");
    assert!(!status.success(), "serve exited 0 without listening: {log}");
    Err(log)
}

/// `sandboxd run --data-dir DATA -- /bin/true`: its exit status and stderr.
fn run_true(data: &Path) -> (bool, String) {
    let out = Command::new(BIN)
        .args(["run", "--network", "none", "--data-dir"])
        .arg(data)
        .args(["--", "/bin/true"])
        .env_remove("SANDBOXD_DATA_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .map(|e| e.path())
        .collect()
}

/// A tempdir any user may enter (`0755`, root's), canonical.
fn open_top() -> (tempfile::TempDir, PathBuf) {
    let top = tempfile::tempdir().expect("tempdir");
    let path = top.path().canonicalize().expect("canonical");
    chmod(&path, 0o755);
    (top, path)
}

#[test]
fn a_data_dir_below_a_dir_another_user_could_rename_it_in_is_refused_with_nothing_made() {
    // (parent's owner, parent's mode, what the refusal names)
    let cases = [
        (65534, 0o755, "owned by uid 65534"),
        (65534, 0o1777, "owned by uid 65534"),
        (0, 0o775, "without the sticky bit"),
        (0, 0o757, "without the sticky bit"),
    ];
    for (owner, mode, why) in cases {
        let (_top, top) = open_top();
        let parent = top.join("home");
        std::fs::create_dir(&parent).expect("mkdir");
        chown(&parent, owner);
        chmod(&parent, mode);
        let data = parent.join("sbx");
        let log =
            serve_outcome(&data).expect_err("serve started on a data dir another user could swap");
        assert!(
            log.contains(why) && log.contains(parent.to_str().expect("utf-8")),
            "{owner}/{mode:o}: the refusal does not say why: {log}"
        );
        assert_eq!(
            entries(&parent),
            Vec::<PathBuf>::new(),
            "serve made something"
        );
        let (ok, err) = run_true(&data);
        assert!(!ok && err.contains(why), "run: {err}");
        assert_eq!(
            entries(&parent),
            Vec::<PathBuf>::new(),
            "run made something"
        );
        chown(&parent, 0); // for the tempdir's removal
    }
}

#[test]
fn a_data_dir_another_user_owns_is_refused_and_left_as_it_is() {
    let (_top, top) = open_top();
    let data = top.join("sbx");
    std::fs::create_dir(&data).expect("mkdir");
    chown(&data, 65534);
    chmod(&data, 0o700);
    let log = serve_outcome(&data).expect_err("serve started on another user's data dir");
    assert!(log.contains("owned by uid 65534"), "{log}");
    let (ok, err) = run_true(&data);
    assert!(!ok && err.contains("owned by uid 65534"), "run: {err}");
    let meta = std::fs::metadata(&data).expect("meta");
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (65534, 0o700));
    assert_eq!(
        entries(&data),
        Vec::<PathBuf>::new(),
        "something was made in it"
    );
    chown(&data, 0);
}

/// A root `0700` dir right in `/tmp` serves, and its database is the server's alone.
#[test]
fn a_root_dir_in_tmp_serves_and_the_database_is_private() {
    let top = tempfile::tempdir().expect("tempdir");
    let data = top.path().canonicalize().expect("canonical");
    assert_eq!(data.parent(), Some(Path::new("/tmp")), "TMPDIR is not /tmp");
    let server = Server::start(&data, Some(MASTER));
    let id = server.create_sandbox(MASTER, &json!({"name": "db", "vcpu": 1, "memoryMb": 128}));
    server.destroy(MASTER, &id);
    drop(server);
    for name in [
        "sandboxd.db",
        "sandboxd.db-wal",
        "sandboxd.db-shm",
        "secrets.key",
    ] {
        let path = data.join(name);
        if let Ok(meta) = std::fs::metadata(&path) {
            assert_eq!(
                meta.mode() & 0o077,
                0,
                "{name} is {:o}",
                meta.mode() & 0o7777
            );
        } else {
            assert_ne!(name, "sandboxd.db", "no database");
        }
    }
    // Nothing else the server wrote in the data dir is open to others either.
    let open: Vec<String> = walkdir(&data)
        .into_iter()
        .filter(|(_, mode, depth)| *depth <= 1 && mode & 0o077 != 0)
        .map(|(p, mode, _)| format!("{} {mode:o}", p.display()))
        .collect();
    assert_eq!(
        open,
        Vec::<String>::new(),
        "entries of the data dir open to others"
    );
}

/// `(path, mode, depth)` of `dir`'s entries (not following symlinks, not entering
/// mounts' contents beyond what `read_dir` lists).
fn walkdir(dir: &Path) -> Vec<(PathBuf, u32, usize)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let meta = std::fs::symlink_metadata(e.path()).expect("meta");
        if !meta.file_type().is_symlink() {
            out.push((e.path(), meta.mode() & 0o7777, 1));
        }
    }
    out
}

/// The outside review's swap: the data dir's parent becomes another user's after
/// start-up; they move the data dir aside, link its entries back but `layers/`, which
/// they make. A tenant's setuid-root snapshot must not land in their dir.
#[test]
fn a_data_dir_swapped_by_an_ancestors_owner_after_start_gets_no_capture() {
    let (_top, top) = open_top();
    let parent = top.join("home");
    std::fs::create_dir(&parent).expect("mkdir");
    chmod(&parent, 0o755);
    let data = parent.join("sbx");
    // No warm pool: its refill would make `sandboxes/...` in the swapped dir meanwhile.
    let env = [("SANDBOXD_WARM_INITS", "0"), ("SANDBOXD_NETWORK", "none")];
    let server = Server::start_with_env(&data, Some(MASTER), &env);
    let mut sandbox = None;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let id =
            server.create_sandbox(MASTER, &json!({"name": "swap", "vcpu": 1, "memoryMb": 128}));
        sandbox = Some(id.clone());
        let (code, _) = server.exec(
            MASTER,
            &id,
            &[
                "/bin/sh",
                "-c",
                "cp /usr/bin/id /planted && chmod 4755 /planted",
            ],
        );
        assert_eq!(code, 0);
        // The parent is given to uid 65534 (a loosened ancestor), who swaps the dir:
        // every entry linked back (names they could learn) but `layers/`, their own.
        let names: Vec<String> = entries(&data)
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .filter(|n| n != "layers")
            .collect();
        chown(&parent, 65534);
        let swap = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ])
            .args(["--", "/bin/sh", "-c"])
            .arg(
                "cd \"$0\" && mv sbx sbx.root && mkdir sbx && cd sbx && \
                 for b in \"$@\"; do ln -s \"../sbx.root/$b\" \"$b\" || exit 1; done && \
                 mkdir layers && chmod 777 layers",
            )
            .arg(&parent)
            .args(&names)
            .output()
            .expect("setpriv");
        assert!(
            swap.status.success(),
            "the swap itself failed: {}",
            String::from_utf8_lossy(&swap.stderr)
        );
        let reply = server.try_request(
            "POST",
            &format!("/v2/sandboxes/{id}/snapshots"),
            MASTER,
            Some(&json!({"name": "swap"})),
        );
        let status = reply.map(|r| r.status).unwrap_or(0);
        let theirs: Vec<PathBuf> = entries(&data.join("layers"));
        assert_eq!(
            theirs,
            Vec::<PathBuf>::new(),
            "a capture wrote into the other user's layers/ (snapshot answered {status})"
        );
        assert!(
            !(200..300).contains(&status),
            "the snapshot was taken: {status}"
        );
        // Nothing the tenant planted is within uid 65534's reach anywhere.
        let found = as_nobody(
            "find \"$0\" -name planted 2>/dev/null",
            top.to_str().expect("utf-8"),
        );
        let found = String::from_utf8_lossy(&found.stdout);
        assert!(found.trim().is_empty(), "uid 65534 reaches {found}");
    }));
    // Put the data dir back (as root) for the teardown.
    chown(&parent, 0);
    let swapped = parent.join("sbx.root");
    if swapped.exists() {
        std::fs::remove_dir_all(&data).expect("remove their dir");
        std::fs::rename(&swapped, &data).expect("put back");
    }
    if let Some(id) = sandbox {
        server.destroy(MASTER, &id);
    }
    drop(server);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
