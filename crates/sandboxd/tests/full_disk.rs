//! Honest disks through a real `sandboxd serve` whose data dir is on a small ext4 the
//! test makes and loop-mounts (300 MiB): a layer that could never fit is refused (400),
//! one that fits only later is refused with 503 and `Retry-After`, either way leaving no
//! sandbox, directory or loop device behind; `df` inside shows no more than the host
//! really has for the sandbox; a full layer is ENOSPC inside, an upload into it answers
//! 507, and DELETE still works and frees the space; an upload whose data the host's full
//! disk cannot take answers 507, never 200.

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
        let tmp = tempfile::tempdir().expect("temp dir");
        let img = tmp.path().join("fs.img");
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mkdir mnt");
        run("truncate", &["-s", "300M", path(&img)]);
        run("mkfs.ext4", &["-q", path(&img)]);
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
        let r = create(&s);
        assert_eq!(r.status, 400, "a 4 GiB disk on 300 MiB: {}", r.text());
        assert_eq!(r.json()["errors"][0]["code"], "invalid_field_format");
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
    assert!(fs.available() >= before, "the layer's space came back");
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
