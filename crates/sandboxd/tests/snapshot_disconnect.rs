//! A snapshot whose HTTP client disconnects mid-capture: the snapshot is not tied to the
//! request, so it finishes, is recorded (the client that left finds it in the list, and
//! a sandbox made from it has its files) and no layer is left that no snapshot records;
//! its disk reservation is held while its copy runs (disk admission is not bypassed by
//! disconnecting).

mod common;
mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::collections::BTreeSet;
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MASTER: &str = "snapshot-disconnect-test-master-key-0123456789";

/// The committed layers in the layer store (dot entries, scratch and locks, left out).
fn layers(data: &Path) -> BTreeSet<String> {
    std::fs::read_dir(data.join("layers"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// The snapshot scratch dirs in the layer store (`layers/.tmp-<uuid>`).
fn scratch_dirs(data: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data.join("layers"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Sends a snapshot request and returns its connection, without reading the answer.
fn start_snapshot(addr: std::net::SocketAddr, key: &str, id: &str) -> TcpStream {
    let body = json!({"name": "left"}).to_string();
    let mut conn = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST /v2/sandboxes/{id}/snapshots HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\
         authorization: Bearer {key}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).expect("send head");
    conn.write_all(body.as_bytes()).expect("send body");
    conn
}

fn snapshot_names(server: &Server) -> Vec<String> {
    let list = server.request("GET", "/v2/snapshots", MASTER, None);
    assert_eq!(list.status, 200, "{}", list.text());
    list.json()["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes every sandbox the server still has, then waits for each to end (a failed
/// assertion included: the temp data dir must not be removed under live mounts).
fn destroy_all(server: &Server) {
    let list = server.request("GET", "/v2/sandboxes", MASTER, None).json();
    for sb in list["data"].as_array().into_iter().flatten() {
        if let (Some(id), false) = (sb["id"].as_str(), sb["status"] == "TERMINATED") {
            server.destroy(MASTER, id);
        }
    }
}

#[test]
fn a_snapshot_whose_client_disconnects_is_recorded_and_leaves_no_stray_layer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    // The capture waits a while with its copy made: the client leaves meanwhile.
    let env = [
        ("SANDBOXD_FAILPOINTS", "capture.copied=sleep(3000)"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    let server = Server::start_with_env(&data, Some(MASTER), &env);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        disconnected_snapshot(&server, &data)
    }));
    destroy_all(&server);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn disconnected_snapshot(server: &Server, data: &Path) {
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "dsnap", "vcpu": 1, "memoryMb": 128}),
    );
    let script = "head -c 8388608 /dev/urandom > /big; echo kept > /marker; sync";
    let (code, out) = server.exec(MASTER, &id, &["/bin/sh", "-c", script]);
    assert_eq!(code, 0, "{out}");
    let before = layers(data);

    let conn = start_snapshot(server.addr, MASTER, &id);
    common::wait_for("the capture's copy made", || {
        scratch_dirs(data).iter().any(|d| d.join("marker").exists())
    });
    // The client gives up (curl -m): the connection closes mid-capture.
    drop(conn);
    // The capture ends (its scratch committed or removed).
    common::wait_for("the capture over", || scratch_dirs(data).is_empty());
    // Recorded: the record follows the commit (a store write), so wait for it a while.
    let deadline = Instant::now() + Duration::from_secs(30);
    while snapshot_names(server).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let new: Vec<String> = layers(data).difference(&before).cloned().collect();
    assert_eq!(
        snapshot_names(server),
        vec!["left".to_owned()],
        "the snapshot was not recorded; layers no record names: {new:?}"
    );
    assert_eq!(new.len(), 1, "the snapshot's layer: {new:?}");

    // The layer is the snapshot's: a sandbox made from it has the files.
    let list = server.request("GET", "/v2/snapshots", MASTER, None).json();
    let snap = list["data"][0]["id"]
        .as_str()
        .expect("snapshot id")
        .to_owned();
    let clone = server.create_sandbox(MASTER, &json!({"name": "dclone", "snapshotId": snap}));
    let (code, out) = server.exec(MASTER, &clone, &["/bin/cat", "/marker"]);
    assert_eq!((code, out.as_str()), (0, "kept\n"));
    server.destroy(MASTER, &clone);
    server.destroy(MASTER, &id);
    let r = server.request("DELETE", &format!("/v2/snapshots/{snap}"), MASTER, None);
    assert!(r.status < 300, "{}", r.text());
    assert_eq!(layers(data), before, "the snapshot's layer outlived it");
}

const MIB: u64 = 1 << 20;

/// A 600 MiB ext4 loop-mounted on `dir/mnt`; unmounted and removed on drop.
struct SmallFs {
    tmp: tempfile::TempDir,
}

impl SmallFs {
    fn new() -> SmallFs {
        let tmp = tempfile::tempdir().expect("temp dir");
        let img = tmp.path().join("fs.img");
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mkdir mnt");
        run("truncate", &["-s", "600M", path(&img)]);
        run("mkfs.ext4", &["-q", path(&img)]);
        run("mount", &["-o", "loop", path(&img), path(&mnt)]);
        SmallFs { tmp }
    }

    fn data(&self) -> PathBuf {
        self.tmp.path().join("mnt").join("data")
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let mnt = self.tmp.path().join("mnt");
        let _ = std::process::Command::new("umount").arg(&mnt).status();
        if !common::mounts_under(&mnt).is_empty()
            || common::mounts_under(self.tmp.path())
                .iter()
                .any(|m| Path::new(m) == mnt)
        {
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
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The MiB a create may still take, as a refused create (it never fits: a second
/// sandbox of the default disk) reports them: the room left beside the sandboxes' disks
/// and the snapshots being written.
fn room_for_creates(server: &Server) -> u64 {
    let body = json!({"name": "probe", "vcpu": 1, "memoryMb": 128});
    let r = server.request("POST", "/v2/sandboxes", MASTER, Some(&body));
    assert_eq!(r.status, 503, "the probe create must not fit: {}", r.text());
    let text = r.text();
    text.split("the server has ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no room in {text}"))
}

/// The disk reservation of a snapshot whose client left is held until its capture
/// ends: creates see the room its copy may still take as taken meanwhile.
#[test]
fn a_snapshot_whose_client_disconnects_keeps_its_disk_reservation_while_it_copies() {
    let fs = SmallFs::new();
    // One sandbox of the default disk fits, a second never does (the probe); the
    // capture waits with its copy made, long enough for the probes below.
    let env = [
        ("SANDBOXD_FAILPOINTS", "capture.copied=sleep(8000)"),
        ("SANDBOXD_NETWORK", "none"),
        ("SANDBOXD_WARM_INITS", "0"),
        ("SANDBOXD_DISK_OVERCOMMIT", "1"),
        ("SANDBOXD_DISK_MB_PER_SANDBOX", "300"),
    ];
    let server = Server::start_with_env(&fs.data(), Some(MASTER), &env);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        reservation_held(&server, &fs.data())
    }));
    destroy_all(&server);
    drop(server);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn reservation_held(server: &Server, data: &Path) {
    let id = server.create_sandbox(
        MASTER,
        &json!({"name": "rsnap", "vcpu": 1, "memoryMb": 128}),
    );
    const FILE_MB: u64 = 50;
    let script = format!("head -c {} /dev/urandom > /big; sync", FILE_MB * MIB);
    let (code, out) = server.exec(MASTER, &id, &["/bin/sh", "-c", &script]);
    assert_eq!(code, 0, "{out}");
    let before = room_for_creates(server);
    // Held meanwhile: the reservation (~FILE_MB) and the copy on disk (~FILE_MB).
    let most = before.saturating_sub(FILE_MB * 3 / 2);
    assert!(
        most > 0,
        "the filesystem is too small for the test: {before} MiB"
    );

    let conn = start_snapshot(server.addr, MASTER, &id);
    common::wait_for("the capture's copy made", || {
        scratch_dirs(data)
            .iter()
            .any(|d| std::fs::metadata(d.join("big")).is_ok_and(|m| m.len() == FILE_MB * MIB))
    });
    drop(conn);
    // Until the capture ends (its scratch dir goes), the room stays taken twice over.
    while !scratch_dirs(data).is_empty() {
        let room = room_for_creates(server);
        let copying = !scratch_dirs(data).is_empty();
        eprintln!("room for creates: {room} MiB (before the snapshot: {before} MiB)");
        assert!(
            room <= most || !copying,
            "{room} MiB for creates while the copy runs ({before} MiB before it): \
             its reservation was given back"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while snapshot_names(server).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(snapshot_names(server), vec!["left".to_owned()]);
    let list = server.request("GET", "/v2/snapshots", MASTER, None).json();
    let snap = list["data"][0]["id"]
        .as_str()
        .expect("snapshot id")
        .to_owned();
    server.destroy(MASTER, &id);
    let r = server.request("DELETE", &format!("/v2/snapshots/{snap}"), MASTER, None);
    assert!(r.status < 300, "{}", r.text());
}
