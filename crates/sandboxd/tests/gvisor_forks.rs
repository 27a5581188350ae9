//! Memory snapshots through the HTTP APIs: a snapshot of a running gVisor sandbox keeps
//! its processes, and each sandbox created from it (Inngest `snapshotId`) continues
//! them on its own (a fork), with its own files and hostname, across a server restart;
//! deleting the snapshot and its clones leaves nothing behind. A container sandbox's
//! snapshot stays filesystem-only and says so. Skipped where runsc is missing.

mod common;
mod fakenet;
mod gvisor_common;
#[path = "gvisor_common/server.rs"]
mod gvisor_server;
mod serve_bin;

use gvisor_common::*;
use gvisor_server::gvisor_data;
use serde_json::json;
use std::path::Path;

/// A Python process whose counter lives only in its memory: each time `/root/inc`
/// appears it counts one, writes the count to `/root/count` and removes the request.
const COUNTER: &str = r#"import os, time
n = 0
while True:
    if os.path.exists('/root/inc'):
        n += 1
        open('/root/count.tmp', 'w').write(str(n))
        os.rename('/root/count.tmp', '/root/count')
        os.remove('/root/inc')
    time.sleep(0.02)
"#;

/// Asks sandbox `id`'s counter process to count one; returns its new count.
fn increment(server: &serve_bin::Server, id: &str) -> u64 {
    let script = "touch /root/inc; while [ -e /root/inc ]; do sleep 0.02; done; cat /root/count";
    let (code, out) = server.exec(MASTER, id, &["/bin/sh", "-c", script]);
    assert_eq!(code, 0, "{out}");
    out.trim().parse().expect("a count")
}

fn sh(server: &serve_bin::Server, id: &str, script: &str) -> (i64, String) {
    server.exec(MASTER, id, &["/bin/sh", "-c", script])
}

fn create(server: &serve_bin::Server, body: serde_json::Value) -> String {
    let r = server.request("POST", "/v2/sandboxes", MASTER, Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["data"]["status"], "RUNNING", "{}", r.text());
    r.json()["data"]["id"].as_str().expect("id").to_string()
}

/// A sandbox named `source` running the Python counter in the background.
fn counting_source(server: &serve_bin::Server) -> String {
    let source = create(
        server,
        json!({"name": "source", "vcpu": 1, "memoryMb": 256}),
    );
    let launch = format!(
        "printf '%s' \"{COUNTER}\" > /root/counter.py && \
         setsid python3 /root/counter.py </dev/null >/dev/null 2>&1 &"
    );
    let (code, out) = sh(server, &source, &launch);
    assert_eq!(code, 0, "{out}");
    source
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn two_sandboxes_created_from_a_memory_snapshot_each_continue_its_processes() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let data = fixture.path.clone();
    let server = fixture.serve(MASTER, &[]);
    let source = counting_source(&server);
    for want in 1..=3 {
        assert_eq!(increment(&server, &source), want);
    }

    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{source}/snapshots"),
        MASTER,
        Some(&json!({"name": "counting"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let snap = r.json()["data"].clone();
    assert_eq!(snap["memory"], true, "{snap}");
    assert_eq!(snap["memoryPackCount"], 1, "{snap}");
    let snapshot = snap["id"].as_str().expect("id").to_string();
    // The source runs on, its counter where it was.
    assert_eq!(increment(&server, &source), 4);

    // The snapshot (its memory image) outlives a server restart.
    drop(server);
    let server = fixture.serve(MASTER, &[]);
    let r = server.request("GET", &format!("/v2/snapshots/{snapshot}"), MASTER, None);
    assert_eq!(r.json()["data"]["memory"], true, "{}", r.text());

    let clones: Vec<String> = ["fork-a", "fork-b"]
        .iter()
        .map(|name| create(&server, json!({"name": name, "snapshotId": snapshot})))
        .collect();
    let (a, b) = (&clones[0], &clones[1]);
    // Each continues the counter from the snapshot's 3 (a new process would say 1),
    // on its own: they diverge.
    assert_eq!(increment(&server, a), 4);
    assert_eq!(increment(&server, a), 5);
    assert_eq!(increment(&server, b), 4);
    assert_eq!(increment(&server, a), 6);
    assert_eq!(increment(&server, source.as_str()), 5);
    // Own files.
    let (code, out) = sh(&server, a, "echo mine > /root/only-in-a");
    assert_eq!(code, 0, "{out}");
    let (code, _) = sh(&server, b, "test -e /root/only-in-a");
    assert_ne!(code, 0, "the second clone sees the first's file");
    let (code, _) = sh(&server, &source, "test -e /root/only-in-a");
    assert_ne!(code, 0, "the source sees a clone's file");
    // Own hostnames (the memory image holds the source's).
    for (id, name) in [(&source, "source"), (a, "fork-a"), (b, "fork-b")] {
        let (code, out) = sh(&server, id, "cat /proc/sys/kernel/hostname");
        assert_eq!((code, out.trim()), (0, name));
    }

    // Deleting the snapshot leaves the clones running (their memory is their own).
    let r = server.request("DELETE", &format!("/v2/snapshots/{snapshot}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
    assert_eq!(increment(&server, b), 5);

    for id in clones.iter().chain([&source]) {
        server.destroy(MASTER, id);
    }
    common::wait_for("every sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    common::wait_for("every state dir gone", || {
        sandbox_dir_names(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
    assert_eq!(entries(&data.join("runsc")), Vec::<String>::new());
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
}

#[test]
fn a_container_sandbox_snapshot_is_filesystem_only_and_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().canonicalize().expect("canonical");
    let env = [
        ("SANDBOXD_ISOLATION", "container"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    let server = serve_bin::Server::start_with_env(&data, Some(MASTER), &env);
    let source = create(
        &server,
        json!({"name": "plain", "vcpu": 1, "memoryMb": 256}),
    );
    let (code, out) = sh(&server, &source, "echo kept > /root/file");
    assert_eq!(code, 0, "{out}");
    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{source}/snapshots"),
        MASTER,
        None,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let snap = r.json()["data"].clone();
    assert_eq!(snap["memory"], false, "{snap}");
    assert_eq!(snap["memoryPackCount"], 0, "{snap}");
    let snapshot = snap["id"].as_str().expect("id").to_string();
    let clone = create(&server, json!({"name": "copy", "snapshotId": snapshot}));
    let (code, out) = sh(&server, &clone, "cat /root/file");
    assert_eq!((code, out.trim()), (0, "kept"));
    assert!(!data.join("memory-snapshots").exists());
    for id in [&clone, &source] {
        server.destroy(MASTER, id);
    }
    let r = server.request("DELETE", &format!("/v2/snapshots/{snapshot}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

#[test]
fn an_openrelay_template_made_from_a_gvisor_sandbox_starts_forks_of_it() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let data = fixture.path.clone();
    let server = fixture.serve(MASTER, &[]);
    let source = counting_source(&server);
    assert_eq!(increment(&server, &source), 1);

    // Building from a sandbox takes nothing else.
    let r = server.request(
        "POST",
        "/v1/sandbox-templates",
        MASTER,
        Some(&json!({"name": "forked", "fromSandbox": source, "run": ["true"]})),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let r = server.request(
        "POST",
        "/v1/sandbox-templates",
        MASTER,
        Some(&json!({"name": "forked", "fromSandbox": source})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["memory"], true, "{}", r.text());
    assert_eq!(increment(&server, &source), 2);

    let r = server.request(
        "POST",
        "/v1/sandboxes",
        MASTER,
        Some(&json!({"template": "forked"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let clone = r.json()["id"].as_str().expect("id").to_string();
    assert_eq!(increment(&server, &clone), 2, "the fork continues from 1");
    assert_eq!(increment(&server, &source), 3);

    let r = server.request("DELETE", "/v1/sandbox-templates/forked", MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
    for id in [&clone, &source] {
        server.destroy(MASTER, id);
    }
    common::wait_for("every sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

/// A gVisor server without network (`SANDBOXD_ISOLATION=gvisor`, `SANDBOXD_NETWORK=none`)
/// over `data`.
fn gvisor_server(data: &Path) -> serve_bin::Server {
    let env = [
        ("SANDBOXD_ISOLATION", "gvisor"),
        ("SANDBOXD_NETWORK", "none"),
    ];
    serve_bin::Server::start_with_env(data, Some(MASTER), &env)
}

/// Takes an Inngest snapshot of `id`; returns its view.
fn snapshot(server: &serve_bin::Server, id: &str) -> serde_json::Value {
    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{id}/snapshots"),
        MASTER,
        None,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["data"].clone()
}

/// A process of the sandbox holding a host socket (a Unix listener on the root):
/// gVisor cannot checkpoint it, so the snapshot keeps the filesystem alone, answers
/// 201 `memory: false` (never a 409) and the sandbox runs on untouched.
#[test]
fn a_snapshot_of_a_sandbox_that_cannot_be_checkpointed_is_filesystem_only() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let data = fixture.path.clone();
    let server = fixture.serve(MASTER, &[]);
    let source = create(
        &server,
        json!({"name": "holder", "vcpu": 1, "memoryMb": 256}),
    );
    let listen = "import socket,time\ns=socket.socket(socket.AF_UNIX)\n\
        s.bind('/root/app.sock')\ns.listen(8)\nopen('/root/listening', 'w').close()\n\
        time.sleep(3600)\n";
    let launch = format!(
        "echo kept > /root/file && printf '%s' \"{listen}\" > /root/listen.py && \
         (setsid python3 /root/listen.py </dev/null >/dev/null 2>&1 &) && \
         while [ ! -e /root/listening ]; do sleep 0.05; done"
    );
    let (code, out) = sh(&server, &source, &launch);
    assert_eq!(code, 0, "{out}");

    let snap = snapshot(&server, &source);
    assert_eq!(
        (snap["memory"].clone(), snap["memoryPackCount"].clone()),
        (json!(false), json!(0)),
        "{snap}"
    );
    // The listener runs on (the sandbox went on as it was).
    let (code, out) = sh(&server, &source, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("/root/listen.py"), "{out}");
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
    // A sandbox from it has the files (fresh processes).
    let id = snap["id"].as_str().expect("id");
    let clone = create(&server, json!({"name": "copy", "snapshotId": id}));
    let (code, out) = sh(&server, &clone, "cat /root/file");
    assert_eq!((code, out.trim()), (0, "kept"));
    for id in [&clone, &source] {
        server.destroy(MASTER, id);
    }
    let r = server.request("DELETE", &format!("/v2/snapshots/{id}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());
    common::wait_for("every sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

/// An HTTP response read as it streams: NDJSON frames in chunks.
struct Stream {
    conn: std::net::TcpStream,
    raw: Vec<u8>,
}

impl Stream {
    fn open(server: &serve_bin::Server, path: &str) -> Stream {
        use std::io::Write;
        let mut conn = std::net::TcpStream::connect(server.addr).expect("connect");
        // A hang guard only: the test waits for output it causes itself.
        conn.set_read_timeout(Some(std::time::Duration::from_secs(120)))
            .expect("timeout");
        let head = format!(
            "GET {path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {MASTER}\r\n\
             connection: close\r\n\r\n",
            server.addr
        );
        conn.write_all(head.as_bytes()).expect("send");
        Stream {
            conn,
            raw: Vec::new(),
        }
    }

    /// The decoded output of the complete frames so far, and whether the stream ended
    /// (its last chunk, or an error frame).
    fn seen(&self) -> (String, bool) {
        use base64::Engine;
        let Some(split) = self.raw.windows(4).position(|w| w == b"\r\n\r\n") else {
            return (String::new(), false);
        };
        let mut rest = &self.raw[split + 4..];
        let mut body = Vec::new();
        let mut ended = false;
        while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = String::from_utf8_lossy(&rest[..eol]);
            let size = usize::from_str_radix(size.trim(), 16).expect("chunk size");
            if size == 0 {
                ended = true;
                break;
            }
            if rest.len() < eol + 2 + size + 2 {
                break;
            }
            body.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
            rest = &rest[eol + 2 + size + 2..];
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        let complete = text.rsplit_once('\n').map_or("", |(done, _)| done);
        let mut out = Vec::new();
        for line in complete.lines() {
            let frame: serde_json::Value = serde_json::from_str(line).expect("NDJSON frame");
            ended |= frame["type"] == "error";
            if let Some(data) = frame["data"].as_str() {
                out.extend(
                    base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .expect("base64"),
                );
            }
        }
        (String::from_utf8_lossy(&out).into_owned(), ended)
    }

    /// Reads until the output holds `want`; panics if the stream ends first.
    fn read_until(&mut self, want: &str) {
        use std::io::Read;
        loop {
            let (out, ended) = self.seen();
            if out.contains(want) {
                return;
            }
            assert!(!ended, "the stream ended before {want:?}: {out:?}");
            let mut buf = [0u8; 4096];
            let n = self.conn.read(&mut buf).expect("read the stream");
            assert!(n > 0, "the connection closed before {want:?}: {out:?}");
            self.raw.extend_from_slice(&buf[..n]);
        }
    }
}

/// A client following a process's output while the sandbox is snapshotted: a memory
/// snapshot would cut it (the agent lets go of every connection for the checkpoint),
/// so the snapshot is filesystem-only and the stream carries on.
#[test]
fn a_snapshot_while_a_stream_is_open_is_filesystem_only_and_the_stream_goes_on() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let data = fixture.path.clone();
    let server = fixture.serve(MASTER, &[]);
    let source = create(
        &server,
        json!({"name": "streaming", "vcpu": 1, "memoryMb": 256}),
    );
    let echo = "echo up; while true; do if [ -e /root/say ]; then cat /root/say; \
        rm /root/say; fi; sleep 0.05; done";
    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{source}/processes"),
        MASTER,
        Some(&json!({"command": ["/bin/sh", "-c", echo]})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let pid = r.json()["data"]["id"].as_str().expect("id").to_string();
    let mut stream = Stream::open(
        &server,
        &format!("/v2/sandboxes/{source}/processes/{pid}/output/stream?tailBytes=0"),
    );
    stream.read_until("up\n");

    let snap = snapshot(&server, &source);
    assert_eq!(snap["memory"], false, "{snap}");
    let (code, out) = sh(&server, &source, "echo after-the-snapshot > /root/say");
    assert_eq!(code, 0, "{out}");
    stream.read_until("after-the-snapshot\n");

    drop(stream);
    server.destroy(MASTER, &source);
    let id = snap["id"].as_str().expect("id");
    let r = server.request("DELETE", &format!("/v2/snapshots/{id}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());
    common::wait_for("every sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

/// A memory image no snapshot record names (a crash between taking it and storing its
/// record) is removed when a server starts, unless a snapshot is being taken then
/// (the writers' lock is held); recorded images stay and still fork.
#[test]
fn memory_images_no_record_names_are_swept_at_start_up_unless_one_is_being_taken() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let data = fixture.path.clone();
    let server = fixture.serve(MASTER, &[]);
    let source = create(
        &server,
        json!({"name": "source", "vcpu": 1, "memoryMb": 256}),
    );
    let snap = snapshot(&server, &source);
    assert_eq!(snap["memory"], true, "{snap}");
    let kept = snap["id"].as_str().expect("id").to_string();
    server.destroy(MASTER, &source);
    drop(server);

    let orphan = uuid::Uuid::new_v4().to_string();
    let orphan_dir = data.join("memory-snapshots").join(&orphan);
    std::fs::create_dir(&orphan_dir).expect("orphan dir");
    std::fs::write(orphan_dir.join("checkpoint.img"), b"left by a crash").expect("image");
    let mut want = vec![kept.clone(), orphan.clone()];
    want.sort();

    // Another process is taking a snapshot (it holds the writers' lock shared).
    let lock = std::fs::File::create(data.join("memory-snapshots.lock")).expect("lock file");
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on a descriptor this test owns and keeps open.
    let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_SH) };
    assert_eq!(rc, 0, "flock");
    let server = gvisor_server(&data);
    let mut left = entries(&data.join("memory-snapshots"));
    left.sort();
    assert_eq!(left, want, "an image was swept while one was being taken");
    drop(server);
    drop(lock);

    // A data dir moved elsewhere: its records name the old paths, so nothing is swept.
    let foreign = "not-a-snapshot".to_string();
    std::fs::create_dir(data.join("memory-snapshots").join(&foreign)).expect("foreign dir");
    let moved = data.with_file_name(format!(
        "{}-moved",
        data.file_name().expect("name").to_string_lossy()
    ));
    /// Moves the data dir back (also on a failure: the clean-ups look for it there).
    struct MoveBack<'a>(&'a Path, &'a Path);
    impl Drop for MoveBack<'_> {
        fn drop(&mut self) {
            if self.0.exists() {
                let _ = std::fs::rename(self.0, self.1);
            }
        }
    }
    std::fs::rename(&data, &moved).expect("move the data dir");
    let move_back = MoveBack(&moved, &data);
    let server = gvisor_server(&moved);
    let mut left = entries(&moved.join("memory-snapshots"));
    left.sort();
    let mut want = vec![kept.clone(), orphan.clone(), foreign.clone()];
    want.sort();
    assert_eq!(left, want, "images were swept in a moved data dir");
    drop(server);
    drop(move_back);
    assert!(data.is_dir(), "the data dir was not moved back");

    // Back in place: only the orphan goes; a dir not named as a snapshot id stays.
    let server = gvisor_server(&data);
    let mut left = entries(&data.join("memory-snapshots"));
    left.sort();
    let mut want = vec![kept.clone(), foreign.clone()];
    want.sort();
    assert_eq!(left, want);
    std::fs::remove_dir(data.join("memory-snapshots").join(&foreign)).expect("foreign dir");
    let clone = create(&server, json!({"name": "fork", "snapshotId": kept}));
    server.destroy(MASTER, &clone);
    let r = server.request("DELETE", &format!("/v2/snapshots/{kept}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
    common::wait_for("every sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
}

/// Sets workspace `default`'s egress policy: the fake host's /29 allowed, `deny` denied.
fn set_policy(data: &Path, fake: &fakenet::FakeNet, deny: &str) {
    let allow = format!("{}.0/29", fake.prefix);
    let args = [
        "network-policy",
        "set",
        "--workspace",
        "default",
        "--allow",
        &allow,
        "--deny",
        deny,
        "--data-dir",
        data.to_str().expect("utf-8"),
    ];
    let out = serve_bin::cli(&args, "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// "ok <own address> hello" or "err ...": a TCP connect from inside sandbox `id`.
fn local_probe(server: &serve_bin::Server, id: &str, host: &str) -> String {
    let args = ["/usr/bin/python3", "-c", fakenet::LOCAL_PROBE, host, "8080"];
    let (code, out) = server.exec(MASTER, id, &args);
    assert_eq!(code, 0, "probe failed: {out}");
    out.trim().to_string()
}

/// Forks of a sandbox with egress (with a runsc that has `--net-disconnect-ok`; Inngest `snapshotId`, an OpenRelay template
/// `fromSandbox`) each get a network of their own: their own namespace, link, lease
/// and address, under the policy their workspace has when they are made (here changed
/// after the source started: .3 allowed, .4 denied), and each one's lease, link and
/// chain go with it.
#[test]
fn forks_of_an_egress_sandbox_get_their_own_address_and_their_workspace_policy() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    if !runsc_disconnects() {
        eprintln!("skipping: an egress sandbox's snapshot keeps no memory on this runsc");
        return;
    }
    let data = fixture.path.clone();
    let fake = fakenet::FakeNet::new();
    let resolver = fake.addr(2);
    let env = [
        ("SANDBOXD_NETWORK", "egress"),
        ("SANDBOXD_RESOLVERS", resolver.as_str()),
    ];
    let server = fixture.serve(MASTER, &env);
    set_policy(&data, &fake, &fake.addr(3));
    let source = create(
        &server,
        json!({"name": "source", "vcpu": 1, "memoryMb": 256}),
    );
    let source_addr = fakenet::leased_address(&source).expect("the source's lease");
    let launch = format!(
        "printf '%s' \"{COUNTER}\" > /root/counter.py && \
         setsid python3 /root/counter.py </dev/null >/dev/null 2>&1 &"
    );
    let (code, out) = sh(&server, &source, &launch);
    assert_eq!(code, 0, "{out}");
    for want in 1..=3 {
        assert_eq!(increment(&server, &source), want);
    }
    assert!(local_probe(&server, &source, &fake.addr(3)).starts_with("err"));

    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{source}/snapshots"),
        MASTER,
        Some(&json!({"name": "counting"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["data"]["memory"], true, "{}", r.text());
    let snapshot = r.json()["data"]["id"].as_str().expect("id").to_string();
    let r = server.request(
        "POST",
        "/v1/sandbox-templates",
        MASTER,
        Some(&json!({"name": "forked", "fromSandbox": source})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["memory"], true, "{}", r.text());
    assert_eq!(
        local_probe(&server, &source, &fake.addr(2)),
        format!("ok {source_addr} hello"),
        "the source's network after its snapshots"
    );

    // The workspace's policy changes before the forks are made.
    set_policy(&data, &fake, &fake.addr(4));
    let mut clones: Vec<String> = ["fork-a", "fork-b"]
        .iter()
        .map(|name| create(&server, json!({"name": name, "snapshotId": snapshot})))
        .collect();
    let r = server.request(
        "POST",
        "/v1/sandboxes",
        MASTER,
        Some(&json!({"template": "forked"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    clones.push(r.json()["id"].as_str().expect("id").to_string());

    let mut seen = vec![source_addr.clone()];
    for clone in &clones {
        assert_eq!(
            increment(&server, clone),
            4,
            "the fork restarted its counter"
        );
        let addr = fakenet::leased_address(clone).expect("a lease of its own");
        assert!(
            !seen.contains(&addr),
            "{addr} is another sandbox's: {seen:?}"
        );
        seen.push(addr.clone());
        assert!(fakenet::link_exists(clone) && fakenet::nft_entries_exist(clone));
        // Its own stack sends from its own address (not the source's the image held).
        assert_eq!(
            local_probe(&server, clone, &fake.addr(2)),
            format!("ok {addr} hello")
        );
        assert_eq!(
            local_probe(&server, clone, &fake.addr(3)),
            format!("ok {addr} hello"),
            "the fork carries the source's old policy"
        );
        assert!(
            local_probe(&server, clone, &fake.addr(4)).starts_with("err"),
            "the fork is not under its workspace's policy"
        );
    }
    assert_eq!(increment(&server, &source), 4);

    for id in clones.iter().chain([&source]) {
        server.destroy(MASTER, id);
        assert_eq!(fakenet::leased_address(id), None, "lease of {id} left");
        assert!(!fakenet::link_exists(id), "veth of {id} left");
        assert!(!fakenet::nft_entries_exist(id), "nft entries of {id} left");
    }
    let r = server.request("DELETE", &format!("/v2/snapshots/{snapshot}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());
    let r = server.request("DELETE", "/v1/sandbox-templates/forked", MASTER, None);
    assert_eq!(r.status, 200, "{}", r.text());
    common::wait_for("every sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
}

/// On a server whose default network is egress, a fork made from a memory snapshot of a
/// source without network (OpenRelay `network: {"mode": "none"}`) gets the network its
/// own create asks for: its own namespace, link, lease and address, from which it
/// reaches the fake host, under the workspace's policy; it continues the source's
/// processes, and the source keeps only its loopback. (Any runsc: the source has no TCP
/// endpoint on a link to save.)
#[test]
fn a_fork_of_a_networkless_source_on_an_egress_server_gets_its_own_egress_address() {
    let Some(fixture) = gvisor_data() else {
        return;
    };
    let data = fixture.path.clone();
    let fake = fakenet::FakeNet::new();
    let resolver = fake.addr(2);
    let env = [
        ("SANDBOXD_NETWORK", "egress"),
        ("SANDBOXD_RESOLVERS", resolver.as_str()),
    ];
    let server = fixture.serve(MASTER, &env);
    set_policy(&data, &fake, &fake.addr(3));
    let body = json!({"template": "default", "network": {"mode": "none"}});
    let r = server.request("POST", "/v1/sandboxes", MASTER, Some(&body));
    assert_eq!(r.status / 100, 2, "{}", r.text());
    let source = r.json()["id"].as_str().expect("id").to_string();
    assert_eq!(
        fakenet::leased_address(&source),
        None,
        "the source has a lease"
    );
    assert!(!fakenet::link_exists(&source), "the source has a link");
    let launch = format!(
        "printf '%s' \"{COUNTER}\" > /root/counter.py && \
         setsid python3 /root/counter.py </dev/null >/dev/null 2>&1 &"
    );
    let (code, out) = sh(&server, &source, &launch);
    assert_eq!(code, 0, "{out}");
    for want in 1..=2 {
        assert_eq!(increment(&server, &source), want);
    }
    assert!(local_probe(&server, &source, &fake.addr(2)).starts_with("err"));

    let r = server.request(
        "POST",
        &format!("/v2/sandboxes/{source}/snapshots"),
        MASTER,
        None,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["data"]["memory"], true, "{}", r.text());
    let snapshot = r.json()["data"]["id"].as_str().expect("id").to_string();
    let fork = create(&server, json!({"name": "fork", "snapshotId": snapshot}));
    assert_eq!(
        increment(&server, &fork),
        3,
        "the fork restarted its counter"
    );
    assert!(
        data.join(format!("sandboxes/{fork}/netns")).exists(),
        "the fork has no network namespace of its own"
    );
    let addr = fakenet::leased_address(&fork).expect("a lease of its own");
    assert!(fakenet::link_exists(&fork) && fakenet::nft_entries_exist(&fork));
    assert_eq!(
        local_probe(&server, &fork, &fake.addr(2)),
        format!("ok {addr} hello")
    );
    assert!(
        local_probe(&server, &fork, &fake.addr(3)).starts_with("err"),
        "the fork is not under its workspace's policy"
    );
    assert!(
        local_probe(&server, &source, &fake.addr(2)).starts_with("err"),
        "the source reaches out after its fork"
    );
    assert_eq!(increment(&server, &source), 3);

    for id in [&fork, &source] {
        server.destroy(MASTER, id);
    }
    assert_eq!(fakenet::leased_address(&fork), None, "lease left");
    assert!(!fakenet::link_exists(&fork), "veth left");
    assert!(!fakenet::nft_entries_exist(&fork), "nft entries left");
    let r = server.request("DELETE", &format!("/v2/snapshots/{snapshot}"), MASTER, None);
    assert_eq!(r.status, 204, "{}", r.text());
    common::wait_for("every sandbox gone", || {
        sandbox_processes_under(&data).is_empty()
    });
    drop(server);
    assert_eq!(common::mounts_under(&data), Vec::<String>::new());
    assert_eq!(
        entries(&data.join("memory-snapshots")),
        Vec::<String>::new()
    );
}
