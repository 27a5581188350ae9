//! Honest disks through a real `sandboxd serve` whose data dir is on a small ext4 the
//! test makes and loop-mounts (300 MiB): a layer that could never fit is refused (400),
//! one that fits only later is refused with 503 and `Retry-After`, either way leaving no
//! sandbox, directory or loop device behind; `df` inside shows no more than the host
//! really has for the sandbox; a full layer is ENOSPC inside, an upload into it answers
//! 507, and DELETE still works and frees the space; an upload whose data the host's full
//! disk cannot take answers 507, never 200; a create whose record would grow the
//! database into the data dir's reserve is refused (503) like any other shortage, and a
//! create is refused the room an image pull under way was granted.

mod registry;
mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::path::{Path, PathBuf};
use std::process::Command;

const KEY: &str = "full-disk-master";
const MIB: u64 = 1 << 20;

/// A 300 MiB ext4 loop-mounted on `dir/mnt`; unmounted and removed on drop.
struct SmallFs {
    tmp: tempfile::TempDir,
}

impl SmallFs {
    fn new() -> SmallFs {
        Self::sized("300M")
    }

    /// A filesystem of `size` (`truncate -s` syntax).
    fn sized(size: &str) -> SmallFs {
        Self::made(size, &[])
    }

    /// A filesystem of `size` made with `mkfs.ext4` options `mkfs` too.
    fn made(size: &str, mkfs: &[&str]) -> SmallFs {
        let tmp = tempfile::tempdir().expect("temp dir");
        let img = tmp.path().join("fs.img");
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mkdir mnt");
        run("truncate", &["-s", size, path(&img)]);
        let mut args = vec!["-q"];
        args.extend_from_slice(mkfs);
        args.push(path(&img));
        run("mkfs.ext4", &args);
        run("mount", &["-o", "loop", path(&img), path(&mnt)]);
        SmallFs { tmp }
    }

    fn mnt(&self) -> PathBuf {
        self.tmp.path().join("mnt")
    }

    fn data(&self) -> PathBuf {
        self.mnt().join("data")
    }

    /// Bytes an unprivileged writer may still use on the filesystem.
    fn available(&self) -> u64 {
        let vfs = nix::sys::statvfs::statvfs(&self.mnt()).expect("statvfs");
        vfs.blocks_available() * vfs.fragment_size()
    }

    /// Inodes an unprivileged writer may still take on the filesystem.
    fn inodes_available(&self) -> u64 {
        nix::sys::statvfs::statvfs(&self.mnt())
            .expect("statvfs")
            .files_available()
    }

    /// Loop devices whose backing file lies inside the filesystem (sandbox layers).
    fn layer_devices(&self) -> Vec<String> {
        let mnt = self.mnt().display().to_string();
        std::fs::read_dir("/sys/block")
            .expect("/sys/block")
            .filter_map(Result::ok)
            .filter(|e| {
                std::fs::read_to_string(e.path().join("loop/backing_file"))
                    .is_ok_and(|f| f.starts_with(&mnt))
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// Sandbox state dirs in the data dir.
    fn state_dirs(&self) -> usize {
        std::fs::read_dir(self.data().join("sandboxes")).map_or(0, |d| d.count())
    }

    /// Allocated bytes of the sandbox layer images.
    fn layers_occupy(&self) -> u64 {
        let Ok(dirs) = std::fs::read_dir(self.data().join("sandboxes")) else {
            return 0;
        };
        dirs.filter_map(Result::ok)
            .filter_map(|d| std::fs::metadata(d.path().join("layer.img")).ok())
            .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
            .sum()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let mnt = self.mnt();
        let _ = Command::new("umount").arg(&mnt).status();
        let left = Command::new("findmnt")
            .args(["-rn", "-o", "TARGET"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if left.lines().any(|l| Path::new(l).starts_with(&mnt)) {
            // Never delete under a live mount: leave the directory for a human.
            std::mem::forget(std::mem::replace(
                &mut self.tmp,
                tempfile::tempdir().expect("temp dir"),
            ));
            panic!("{} is still mounted", mnt.display());
        }
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server that, when dropped (a failed assertion included), deletes every sandbox it
/// still has before it stops, so that the filesystem can be unmounted.
struct Served(Server);

impl std::ops::Deref for Served {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.0
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let list = self.0.request("GET", "/v2/sandboxes", KEY, None).json();
        for sb in list["data"].as_array().into_iter().flatten() {
            if let (Some(id), false) = (sb["id"].as_str(), sb["status"] == "TERMINATED") {
                let r = self
                    .0
                    .request("DELETE", &format!("/v2/sandboxes/{id}"), KEY, None);
                if !matches!(r.status, 202 | 204) {
                    eprintln!("cleanup: DELETE {id}: {} {}", r.status, r.text());
                    continue;
                }
                let path = format!("/v2/sandboxes/{id}");
                for _ in 0..500 {
                    let got = self.0.request("GET", &path, KEY, None).json();
                    if got["data"]["status"] == "TERMINATED" {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
    }
}

fn serve(fs: &SmallFs, env: &[(&str, &str)]) -> Served {
    let mut all = vec![
        ("SANDBOXD_DISK_OVERCOMMIT", "1"),
        ("SANDBOXD_WARM_INITS", "0"),
        ("SANDBOXD_NETWORK", "none"),
        ("SANDBOXD_MAX_DISK_MB_PER_SANDBOX", "4096"),
    ];
    all.extend_from_slice(env);
    Served(Server::start_with_env(&fs.data(), Some(KEY), &all))
}

/// A create body with a fresh name.
fn body(memory_mb: u32) -> serde_json::Value {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    json!({"name": format!("disk{n}"), "vcpu": 1, "memoryMb": memory_mb})
}

fn create(s: &Server) -> serve_bin::Reply {
    s.request("POST", "/v2/sandboxes", KEY, Some(&body(128)))
}

fn active(s: &Server) -> usize {
    let list = s.request("GET", "/v2/sandboxes", KEY, None).json();
    list["data"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|s| s["status"] == "RUNNING").count())
}

/// Bytes `df` inside the sandbox says are free on its root.
fn free_inside(s: &Server, id: &str) -> u64 {
    let (code, out) = s.exec(KEY, id, &["/usr/bin/df", "-B1", "--output=avail", "/"]);
    assert_eq!(code, 0, "{out}");
    out.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df avail")
}

/// `df` inside must not promise more than the host's free space plus what the
/// sandbox's own layer already holds (with 1 MiB of slack for rounding).
fn assert_df_honest(fs: &SmallFs, s: &Server, id: &str) {
    let inside = free_inside(s, id);
    let really = fs.available() + fs.layers_occupy();
    assert!(
        inside <= really + MIB,
        "df inside says {} MiB free, the host has {} MiB for it",
        inside / MIB,
        really / MIB
    );
}

/// Status and body text of a PUT of `bytes` bytes to `/upload.bin`; the server may
/// answer (and close) before it has read the whole body.
fn upload(s: &Server, id: &str, bytes: usize) -> (u16, String) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(s.addr).expect("connect");
    let head = format!(
        "PUT /v2/sandboxes/{id}/files?path=/upload.bin HTTP/1.1\r\nhost: x\r\n\
         connection: close\r\nauthorization: Bearer {KEY}\r\n\
         content-type: application/octet-stream\r\ncontent-length: {bytes}\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).expect("send head");
    let _ = conn.write_all(&vec![b'a'; bytes]);
    let mut raw = Vec::new();
    let _ = conn.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[test]
fn creates_are_admitted_only_for_disks_the_host_can_hold() {
    let fs = SmallFs::new();
    {
        let s = serve(&fs, &[("SANDBOXD_DISK_MB_PER_SANDBOX", "4096")]);
        // The server's default, which Inngest clients cannot ask about: not their 400.
        let r = create(&s);
        assert_eq!(
            r.status,
            503,
            "a 4 GiB default disk on 300 MiB: {}",
            r.text()
        );
        assert_eq!(r.json()["errors"][0]["code"], "compute_unavailable");
        assert!(r.text().contains("operator"), "{}", r.text());
        assert_eq!((active(&s), fs.state_dirs()), (0, 0));
        assert!(fs.layer_devices().is_empty());
    }
    let s = serve(&fs, &[("SANDBOXD_DISK_MB_PER_SANDBOX", "120")]);
    let first = s.create_sandbox(KEY, &body(128));
    assert_df_honest(&fs, &s, &first);
    let r = create(&s);
    assert_eq!(r.status, 503, "a second 120 MiB disk: {}", r.text());
    assert_eq!(r.json()["errors"][0]["code"], "compute_unavailable");
    assert!(r.header("retry-after").is_some());
    assert_eq!((active(&s), fs.state_dirs()), (1, 1), "nothing half-made");
    assert_eq!(fs.layer_devices().len(), 1, "no leaked loop device");
    s.destroy(KEY, &first);
    let second = s.create_sandbox(KEY, &body(128));
    assert_df_honest(&fs, &s, &second);
    s.destroy(KEY, &second);
}

#[test]
fn a_full_layer_is_enospc_inside_507_on_upload_and_delete_frees_it() {
    let fs = SmallFs::new();
    let s = serve(&fs, &[("SANDBOXD_DISK_MB_PER_SANDBOX", "64")]);
    let id = s.create_sandbox(KEY, &body(128));
    let before = fs.available();
    let (code, out) = s.exec(
        KEY,
        &id,
        &[
            "/bin/sh",
            "-c",
            "dd if=/dev/zero of=/fill bs=1M count=100 2>&1; sync",
        ],
    );
    assert!(out.contains("No space left on device"), "{code}: {out}");
    let (status, text) = upload(&s, &id, 4 << 20);
    assert_eq!(status, 507, "{text}");
    assert!(text.contains("sandbox_insufficient_storage"), "{text}");
    s.destroy(KEY, &id);
    assert!(fs.layer_devices().is_empty());
    // The 64 MiB layer was full; what the store's log and directories grew by meanwhile
    // (a few KiB) is not a leak of it.
    let after = fs.available();
    assert!(
        after + (1 << 20) >= before,
        "the layer's space came back: {before} free before, {after} after"
    );
    let again = s.create_sandbox(KEY, &body(128));
    let (status, text) = upload(&s, &again, 4 << 20);
    assert_eq!(status, 200, "{text}");
    s.destroy(KEY, &again);
}

/// The data dir's filesystem itself full: the store gives up its reserve so that the
/// DELETEs that free the space land (a 500 before the reserve).
#[test]
fn an_upload_the_full_host_cannot_store_is_507_and_delete_still_works() {
    let fs = SmallFs::new();
    // Overcommitted on purpose: two 400 MiB layers on about 270 MiB.
    let s = serve(
        &fs,
        &[
            ("SANDBOXD_DISK_MB_PER_SANDBOX", "400"),
            ("SANDBOXD_DISK_OVERCOMMIT", "4"),
        ],
    );
    let filler = s.create_sandbox(KEY, &body(256));
    let victim = s.create_sandbox(KEY, &body(256));
    let _ = s.exec(
        KEY,
        &filler,
        &[
            "/bin/sh",
            "-c",
            "dd if=/dev/urandom of=/fill bs=1M count=320 2>&1; sync",
        ],
    );
    let (status, text) = upload(&s, &victim, 24 << 20);
    assert_ne!(status, 200, "the host is full; the upload cannot be stored");
    assert_eq!(status, 507, "{text}");
    s.destroy(KEY, &filler);
    s.destroy(KEY, &victim);
    assert!(fs.layer_devices().is_empty());
    let again = s.create_sandbox(KEY, &body(256));
    s.destroy(KEY, &again);
}

/// Lines the kernel logged about lost writes on any of `devices` (loop devices of the
/// small filesystem's layers), among the `dmesg` lines past the first `skip`.
fn lost_writes(skip: usize, devices: &[String]) -> Vec<String> {
    let out = Command::new("dmesg").output().expect("dmesg");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(skip)
        .filter(|l| devices.iter().any(|d| l.contains(d.as_str())))
        .filter(|l| {
            l.contains("lost async page write")
                || l.contains("data loss")
                || l.contains("I/O error")
        })
        .map(str::to_owned)
        .collect()
}

fn dmesg_lines() -> usize {
    let out = Command::new("dmesg").output().expect("dmesg");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Snapshots are admitted like layers: one that would eat the room an admitted sandbox
/// is owed is refused as a shortage (503, Retry-After), and that sandbox can then fill
/// its own disk with no I/O error and without filling the host.
#[test]
fn snapshots_are_refused_before_they_eat_the_room_another_sandbox_is_owed() {
    let fs = SmallFs::sized("400M");
    let s = serve(&fs, &[("SANDBOXD_DISK_MB_PER_SANDBOX", "100")]);
    let writer = s.create_sandbox(KEY, &body(128));
    let other = s.create_sandbox(KEY, &body(128));
    let devices = fs.layer_devices();
    let skip = dmesg_lines();
    // Small: fits beside what both sandboxes may still write.
    let (code, out) = s.exec(
        KEY,
        &writer,
        &["/bin/sh", "-c", "echo small > /small; sync"],
    );
    assert_eq!(code, 0, "{out}");
    let snapshot = |s: &Server| {
        s.request(
            "POST",
            &format!("/v2/sandboxes/{writer}/snapshots"),
            KEY,
            Some(&json!({})),
        )
    };
    let r = snapshot(&s);
    assert_eq!(r.status, 201, "a small snapshot fits: {}", r.text());
    // 70 MiB snapshots of new data each time, until they are refused.
    let mut refused = None;
    for round in 0..4 {
        let fill =
            format!("rm -f /data*; dd if=/dev/urandom of=/data{round} bs=1M count=70 2>&1; sync");
        let (code, out) = s.exec(KEY, &writer, &["/bin/sh", "-c", &fill]);
        assert_eq!(code, 0, "{out}");
        let r = snapshot(&s);
        if r.status != 201 {
            refused = Some(r);
            break;
        }
    }
    // The other sandbox fills its own disk: ENOSPC inside at its limit, nothing lost.
    let (_, out) = s.exec(
        KEY,
        &other,
        &[
            "/bin/sh",
            "-c",
            "dd if=/dev/urandom of=/fill bs=1M count=200 2>&1; sync; echo synced $?",
        ],
    );
    let lost = lost_writes(skip, &devices);
    assert!(lost.is_empty(), "the kernel lost writes: {lost:?}");
    assert!(fs.available() > 0, "the host's filesystem filled");
    assert!(out.contains("No space left on device"), "{out}");
    assert!(out.contains("synced 0"), "{out}");
    let r = refused.expect("snapshots past the room other is owed are refused");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(
        r.json()["errors"][0]["code"],
        "compute_unavailable",
        "{}",
        r.text()
    );
    assert!(
        r.header("retry-after").is_some(),
        "a shortage says when to retry"
    );
    assert!(r.text().contains("snapshot"), "{}", r.text());
    s.destroy(KEY, &other);
    s.destroy(KEY, &writer);
}

/// A create refused for disk room that may come back (the host's filesystem is busy
/// with other files) is a shortage in each dialect's shape, 503 with Retry-After; only
/// a disk the client asked for that the filesystem could never hold is its 400.
#[test]
fn a_create_refused_for_room_that_may_come_back_is_a_shortage_in_each_dialect() {
    use sandboxd_engine::accounts::Accounts;
    let fs = SmallFs::new();
    std::fs::create_dir_all(fs.data()).expect("data dir");
    let runzivo_key = {
        let store =
            sandboxd_store::SqliteStore::open(fs.data().join("sandboxd.db")).expect("store");
        let accounts = Accounts::new(&store);
        let ws = accounts
            .create_workspace("Disk", [("runzivo".into(), "t_disk".into())].into())
            .expect("workspace");
        accounts
            .create_key(Some(&ws.id), vec!["sandboxes:write".into()], vec![])
            .expect("key")
    };
    let s = serve(&fs, &[("SANDBOXD_DISK_MB_PER_SANDBOX", "100")]);
    // Room that comes back: a host file takes most of the filesystem for now.
    let filler = fs.mnt().join("filler");
    let left = fs.available() / MIB;
    run(
        "fallocate",
        &[
            "-l",
            &format!("{}M", left.saturating_sub(60)),
            path(&filler),
        ],
    );

    let r = create(&s);
    assert_eq!(r.status, 503, "Inngest: {}", r.text());
    assert_eq!(r.json()["errors"][0]["code"], "compute_unavailable");
    assert!(r.header("retry-after").is_some());

    let or = |body: serde_json::Value| {
        serve_bin::http(
            s.addr,
            "POST",
            "/v1/sandboxes",
            &[
                ("authorization", format!("Bearer {KEY}")),
                ("content-type", "application/json".into()),
            ],
            &body.to_string(),
        )
    };
    let r = or(json!({"template": "default", "waitSeconds": 0}));
    assert_eq!(r.status, 503, "OpenRelay: {}", r.text());
    assert_eq!(r.json()["code"], "CAPACITY_EXHAUSTED", "{}", r.text());
    assert!(r.header("retry-after").is_some());

    let rz = |body: serde_json::Value| {
        serve_bin::http(
            s.addr,
            "POST",
            "/v1/customer/tenants/t_disk/sandboxes",
            &[
                ("authorization", format!("Bearer {runzivo_key}")),
                ("content-type", "application/json".into()),
            ],
            &body.to_string(),
        )
    };
    let r = rz(json!({"disk_mb": 100}));
    assert_eq!(r.status, 503, "Runzivo: {}", r.text());
    assert_eq!(
        r.json()["error"]["code"],
        "sandboxes_unavailable",
        "{}",
        r.text()
    );
    assert!(r.header("retry-after").is_some());
    // A size the filesystem could never hold is the client's mistake.
    let r = rz(json!({"disk_mb": 4000}));
    assert_eq!(r.status, 400, "Runzivo: {}", r.text());
    assert!(r.text().contains("disk_mb"), "{}", r.text());
    assert_eq!((active(&s), fs.state_dirs()), (0, 0), "nothing half-made");

    std::fs::remove_file(&filler).expect("remove filler");
    let id = s.create_sandbox(KEY, &body(128));
    s.destroy(KEY, &id);
}

/// The database's growth counts too: with the data dir down to its reserve (64 MiB)
/// a create, whose record would grow the database into it, is refused as a shortage in
/// each dialect's shape (503, Retry-After) even when no layer size is accounted
/// (unlimited disks), reads still answer, and once the room is back creates are
/// admitted again.
#[test]
fn a_create_whose_record_would_eat_the_reserve_is_a_shortage() {
    let fs = SmallFs::new();
    std::fs::create_dir_all(fs.data()).expect("data dir");
    let s = serve(
        &fs,
        &[
            ("SANDBOXD_DISK_MB_PER_SANDBOX", "0"),
            ("SANDBOXD_MAX_DISK_MB_PER_SANDBOX", "0"),
        ],
    );
    let filler = fs.mnt().join("filler");
    let left = fs.available() / MIB;
    run(
        "fallocate",
        &[
            "-l",
            &format!("{}M", left.saturating_sub(30)),
            path(&filler),
        ],
    );

    let r = create(&s);
    assert_eq!(r.status, 503, "Inngest: {}", r.text());
    assert_eq!(
        r.json()["errors"][0]["code"],
        "compute_unavailable",
        "{}",
        r.text()
    );
    assert!(r.header("retry-after").is_some());
    let r = serve_bin::http(
        s.addr,
        "POST",
        "/v1/sandboxes",
        &[
            ("authorization", format!("Bearer {KEY}")),
            ("content-type", "application/json".into()),
            ("idempotency-key", "full-disk-1".into()),
        ],
        &json!({"template": "default"}).to_string(),
    );
    assert_eq!(r.status, 503, "OpenRelay: {}", r.text());
    assert_eq!(r.json()["code"], "CAPACITY_EXHAUSTED", "{}", r.text());
    assert!(r.header("retry-after").is_some());
    let list = s.request("GET", "/v2/sandboxes", KEY, None);
    assert_eq!(list.status, 200, "reads still answer: {}", list.text());
    assert_eq!((active(&s), fs.state_dirs()), (0, 0), "nothing half-made");

    std::fs::remove_file(&filler).expect("remove filler");
    // The room is measured again within seconds of its last measure.
    let made = (0..100)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            create(&s)
        })
        .find(|r| r.status != 503)
        .expect("a create once the room is back");
    assert_eq!(made.status / 100, 2, "{}", made.text());
    let id = made.json()["data"]["id"].as_str().expect("id").to_owned();
    s.destroy(KEY, &id);
}

/// Snapshots of a sandbox full of empty files take no blocks but an inode per file:
/// they are admitted for their inodes too, refused (503, Retry-After) once the data
/// dir's free inodes less the reserve run short, and the data dir keeps that reserve,
/// so another create and its sandbox's files still work.
#[test]
fn snapshots_of_empty_files_are_refused_before_they_take_the_data_dirs_inodes() {
    // 300 MiB with only ~24k inodes: each snapshot below takes ~6000 of them.
    let fs = SmallFs::made("300M", &["-N", "24000"]);
    let s = serve(&fs, &[("SANDBOXD_DISK_MB_PER_SANDBOX", "40")]);
    let many = s.create_sandbox(KEY, &body(128));
    let (code, out) = s.exec(
        KEY,
        &many,
        &[
            "/bin/sh",
            "-c",
            "mkdir /many && cd /many && seq 6000 | xargs touch && sync",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let mut refused = None;
    for round in 0..6 {
        // New content each round: the layer is not the one stored already.
        let mark = format!("echo {round} > /round; sync");
        let (code, out) = s.exec(KEY, &many, &["/bin/sh", "-c", &mark]);
        assert_eq!(code, 0, "{out}");
        let r = s.request(
            "POST",
            &format!("/v2/sandboxes/{many}/snapshots"),
            KEY,
            Some(&json!({})),
        );
        if r.status != 201 {
            refused = Some((round, r));
            break;
        }
    }
    let (round, r) = refused.expect("snapshots past the inodes are refused");
    assert!(round >= 1, "the first snapshot fits: {}", r.text());
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(
        r.json()["errors"][0]["code"],
        "compute_unavailable",
        "{}",
        r.text()
    );
    assert!(
        r.header("retry-after").is_some(),
        "a shortage says when to retry"
    );
    assert!(r.text().contains("inodes"), "{}", r.text());
    assert!(
        fs.inodes_available() >= sandboxd_engine::disk_admission::INODE_RESERVE,
        "the data dir keeps its inode reserve: {} free",
        fs.inodes_available()
    );
    // Other creates still work, and their sandboxes write.
    let other = s.create_sandbox(KEY, &body(128));
    let (code, out) = s.exec(KEY, &other, &["/bin/sh", "-c", "echo ok > /ok; cat /ok"]);
    assert_eq!((code, out.trim()), (0, "ok"));
    s.destroy(KEY, &other);
    s.destroy(KEY, &many);
}

/// The first number after `field=` (text log) or `"field":` (JSON log) in `line`.
fn logged_number(line: &str, field: &str) -> u64 {
    let at = [format!("{field}="), format!("\"{field}\":")]
        .iter()
        .find_map(|k| line.find(k.as_str()).map(|i| i + k.len()))
        .unwrap_or_else(|| panic!("no {field} in {line}"));
    line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number for {field} in {line}"))
}

/// A server on `fs` whose snapshots meet `failpoint` (`name=actions`), one of its
/// sandboxes (100 MiB of disk), and a snapshot of it under way on a thread of its own.
fn snapshot_held(
    fs: &SmallFs,
    failpoint: &str,
) -> (Served, String, std::thread::JoinHandle<serve_bin::Reply>) {
    let s = serve(
        fs,
        &[
            ("SANDBOXD_DISK_MB_PER_SANDBOX", "100"),
            ("SANDBOXD_FAILPOINTS", failpoint),
        ],
    );
    let id = s.create_sandbox(KEY, &body(128));
    let (addr, path) = (s.addr, format!("/v2/sandboxes/{id}/snapshots"));
    let snapshot = std::thread::spawn(move || {
        let headers = [
            ("authorization", format!("Bearer {KEY}")),
            ("content-type", "application/json".to_owned()),
        ];
        serve_bin::http(addr, "POST", &path, &headers, "{}")
    });
    (s, id, snapshot)
}

/// A snapshot stores no more than it reserved: the sandbox is frozen before its layer
/// is measured, so a file it grows while the snapshot is held just past the measure
/// (failpoint `snapshot.measured`) is not in the snapshot.
#[test]
fn a_file_grown_during_a_snapshot_is_never_stored_beyond_its_reservation() {
    let fs = SmallFs::new();
    let (s, id, snapshot) = snapshot_held(&fs, "snapshot.measured=sleep(4000)");
    let line = s.wait_for_line(|l| l.contains("snapshot: layer measured"));
    let measured = logged_number(&line, "bytes");
    // Held past its measure: the sandbox grows a file by 20 MiB (on the old order it
    // ran on meanwhile; frozen, it writes only once the snapshot is done).
    let (addr, path) = (s.addr, format!("/v2/sandboxes/{id}/exec"));
    let grow = std::thread::spawn(move || {
        let headers = [
            ("authorization", format!("Bearer {KEY}")),
            ("content-type", "application/json".to_owned()),
        ];
        let body = json!({"command": ["/bin/sh", "-c",
            "dd if=/dev/urandom of=/grown bs=1M count=20 2>&1; sync"]});
        serve_bin::http(addr, "POST", &path, &headers, &body.to_string())
    });
    let r = snapshot.join().expect("the snapshot request");
    assert_eq!(r.status, 201, "{}", r.text());
    let stored = r.json()["data"]["storedBytes"]
        .as_u64()
        .expect("storedBytes");
    assert!(
        stored <= measured,
        "the snapshot stored {stored} bytes, {measured} were measured and reserved"
    );
    let grown = grow.join().expect("the exec");
    assert_eq!(grown.status, 200, "{}", grown.text());
    s.destroy(KEY, &id);
}

/// A snapshot reserves room on a measure of its running sandbox before it freezes it (so
/// a wait for admission never keeps it frozen); what the sandbox writes between that
/// estimate and the freeze (the snapshot held there, failpoint `snapshot.admission`) is
/// measured frozen and reserved too, and stored: the snapshot is never more than the
/// frozen measure.
#[test]
fn what_a_sandbox_writes_before_its_snapshot_freezes_it_is_reserved_and_stored() {
    let fs = SmallFs::new();
    let (s, id, snapshot) = snapshot_held(&fs, "snapshot.admission=sleep(15000)");
    let line = s.wait_for_line(|l| l.contains("snapshot: layer estimated"));
    let estimated = logged_number(&line, "bytes");
    // Held before its admission, the sandbox running: it writes 20 MiB.
    let (code, out) = s.exec(
        KEY,
        &id,
        &[
            "/bin/sh",
            "-c",
            "dd if=/dev/urandom of=/grown bs=1M count=20 2>&1; sync",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = snapshot.join().expect("the snapshot request");
    assert_eq!(r.status, 201, "{}", r.text());
    let line = s.wait_for_line(|l| l.contains("snapshot: layer measured"));
    let measured = logged_number(&line, "bytes");
    assert!(
        measured >= estimated + 20 * MIB,
        "measured frozen {measured}, estimated {estimated}"
    );
    let stored = r.json()["data"]["storedBytes"]
        .as_u64()
        .expect("storedBytes");
    assert!(
        (20 * MIB..=measured).contains(&stored),
        "the snapshot stored {stored} bytes, {measured} were measured and reserved"
    );
    s.destroy(KEY, &id);
}

/// A gVisor snapshot keeps the sandbox's memory: its image may take the memory limit,
/// which is reserved too; past the room the other sandbox is owed it is refused.
#[test]
fn a_memory_snapshot_is_admitted_for_its_memory_limit_too() {
    if !Path::new("/usr/bin/runsc").exists() {
        assert!(
            std::env::var_os("SANDBOXD_CI").is_none(),
            "runsc is missing"
        );
        return;
    }
    let fs = SmallFs::sized("400M");
    let s = serve(
        &fs,
        &[
            ("SANDBOXD_DISK_MB_PER_SANDBOX", "100"),
            ("SANDBOXD_ISOLATION", "gvisor"),
        ],
    );
    let source = s.create_sandbox(KEY, &body(256));
    let _other = s.create_sandbox(KEY, &body(128));
    let r = s.request(
        "POST",
        &format!("/v2/sandboxes/{source}/snapshots"),
        KEY,
        Some(&json!({})),
    );
    assert_eq!(
        r.status,
        503,
        "256 MiB of memory image past ~100 MiB of room: {}",
        r.text()
    );
    assert_eq!(r.json()["errors"][0]["code"], "compute_unavailable");
    assert!(r.header("retry-after").is_some());
    let got = s.request("GET", &format!("/v2/sandboxes/{source}"), KEY, None);
    assert_eq!(
        got.json()["data"]["status"],
        "RUNNING",
        "the source runs on"
    );
}

/// Whether runsc is here (a gVisor test skips without it, fails under SANDBOXD_CI).
fn runsc_here() -> bool {
    if Path::new("/usr/bin/runsc").exists() {
        return true;
    }
    assert!(
        std::env::var_os("SANDBOXD_CI").is_none(),
        "runsc is missing"
    );
    false
}

/// Memory images (`memory/checkpoint.img`) in the data dir's sandbox state dirs.
fn memory_images(fs: &SmallFs) -> usize {
    let Ok(dirs) = std::fs::read_dir(fs.data().join("sandboxes")) else {
        return 0;
    };
    dirs.filter_map(Result::ok)
        .filter(|d| d.path().join("memory/checkpoint.img").exists())
        .count()
}

/// Starts a process in `id` that holds `mib` MiB of random memory, and waits until it
/// does; returns its pid.
fn hold_memory(s: &Server, id: &str, mib: u32) -> String {
    let script = format!(
        "setsid /usr/bin/python3 -c 'import os,time; x=os.urandom({mib}<<20); \
         open(\"/held.tmp\",\"w\").write(str(os.getpid())); os.replace(\"/held.tmp\",\"/held\"); \
         time.sleep(3600)' </dev/null >/dev/null 2>&1 &"
    );
    let (code, out) = s.exec(KEY, id, &["/bin/sh", "-c", &script]);
    assert_eq!(code, 0, "{out}");
    for _ in 0..600 {
        let (code, pid) = s.exec(KEY, id, &["/bin/sh", "-c", "cat /held 2>/dev/null"]);
        if code == 0 && !pid.trim().is_empty() {
            return pid.trim().to_owned();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the memory holder never started");
}

/// A gVisor pause to disk writes the sandbox's memory image into the data dir: it is
/// admitted for its memory limit like a memory snapshot. Past the room another
/// sandbox is owed it pauses in memory instead (nothing written), the other sandbox
/// then fills its own disk with nothing lost, and the paused one resumes intact.
#[test]
fn a_pause_to_disk_without_room_pauses_in_memory_and_leaves_the_room_owed() {
    if !runsc_here() {
        return;
    }
    let fs = SmallFs::sized("400M");
    let s = serve(
        &fs,
        &[
            ("SANDBOXD_DISK_MB_PER_SANDBOX", "100"),
            ("SANDBOXD_ISOLATION", "gvisor"),
        ],
    );
    let big = s.create_sandbox(KEY, &body(256));
    let other = s.create_sandbox(KEY, &body(128));
    let devices = fs.layer_devices();
    let pid = hold_memory(&s, &big, 150);
    let skip = dmesg_lines();
    let before = fs.available();
    let r = s.request("POST", &format!("/v2/sandboxes/{big}/pause"), KEY, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["status"], "PAUSED", "{}", r.text());
    let after = fs.available();
    assert_eq!(
        memory_images(&fs),
        0,
        "a 256 MiB memory image past ~100 MiB of room was written"
    );
    assert!(
        after + 32 * MIB > before,
        "the pause took {} MiB of the data dir",
        (before - after) / MIB
    );
    // The other sandbox fills its own disk: ENOSPC inside at its limit, nothing lost.
    let (_, out) = s.exec(
        KEY,
        &other,
        &[
            "/bin/sh",
            "-c",
            "dd if=/dev/urandom of=/fill bs=1M count=200 2>&1; sync; echo synced $?",
        ],
    );
    let lost = lost_writes(skip, &devices);
    assert!(lost.is_empty(), "the kernel lost writes: {lost:?}");
    assert!(fs.available() > 0, "the host's filesystem filled");
    assert!(out.contains("No space left on device"), "{out}");
    assert!(out.contains("synced 0"), "{out}");
    // Paused in memory: resume finds its process with its memory.
    let r = s.request("POST", &format!("/v2/sandboxes/{big}/resume"), KEY, None);
    assert_eq!(r.status, 200, "{}", r.text());
    let (code, out) = s.exec(KEY, &big, &["/bin/sh", "-c", &format!("kill -0 {pid}")]);
    assert_eq!(code, 0, "the memory holder is gone after resume: {out}");
    s.destroy(KEY, &other);
    s.destroy(KEY, &big);
}

/// The autoPause sweep moves a consenting idle sandbox to disk only when its memory
/// image fits: with no room it leaves the sandbox running and writes nothing.
#[test]
fn the_auto_pause_sweep_never_writes_an_image_past_the_room() {
    if !runsc_here() {
        return;
    }
    let fs = SmallFs::sized("400M");
    let s = serve(
        &fs,
        &[
            ("SANDBOXD_DISK_MB_PER_SANDBOX", "100"),
            ("SANDBOXD_ISOLATION", "gvisor"),
            ("SANDBOXD_AUTO_PAUSE_MEMORY_BUDGET_MB", "1"),
            ("SANDBOXD_AUTO_PAUSE_INTERVAL_MS", "200"),
        ],
    );
    let mut willing = body(256);
    willing["autoPause"] = json!(true);
    let big = s.create_sandbox(KEY, &willing);
    let _other = s.create_sandbox(KEY, &body(128));
    let line = s.wait_for_line(|l| l.contains("autoPause:") && l.contains(big.as_str()));
    assert!(line.contains("no room on disk"), "{line}");
    assert_eq!(memory_images(&fs), 0, "a memory image was written");
    let got = s.request("GET", &format!("/v2/sandboxes/{big}"), KEY, None);
    assert_eq!(got.json()["data"]["status"], "RUNNING", "{}", got.text());
    let (code, out) = s.exec(KEY, &big, &["/bin/true"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_create_is_refused_the_room_an_image_pull_under_way_was_granted() {
    let fs = SmallFs::new();
    let s = serve(&fs, &[("SANDBOXD_DISK_MB_PER_SANDBOX", "120")]);
    // An 80 MiB blob, admitted (claimed) and then held mid-download by a proxy.
    let registry = registry::Registry::start();
    let work = tempfile::tempdir().expect("tempdir");
    let layout = registry::random_layers(work.path(), "a", 80, 1);
    registry.push_layout(&layout, "room/a");
    let proxy = registry::proxy::Proxy::start(registry.port);
    let pull = registry::pull_held(&proxy, "room/a", &fs.data());
    let r = create(&s);
    proxy.cut();
    let _ = pull.wait_with_output();
    assert_eq!(
        r.status,
        503,
        "a 120 MiB disk beside an 80 MiB pull: {}",
        r.text()
    );
    assert_eq!(r.json()["errors"][0]["code"], "compute_unavailable");
    assert_eq!((active(&s), fs.state_dirs()), (0, 0), "nothing half-made");
    // The pull ended: its room is the sandbox's.
    let id = s.create_sandbox(KEY, &body(128));
    s.destroy(KEY, &id);
}
