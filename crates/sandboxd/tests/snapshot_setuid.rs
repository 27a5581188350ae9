//! A setuid-root program a tenant plants through a snapshot stays what it is for the
//! sandbox (a sandbox made from the snapshot still sees its setuid bit) but is out of
//! every other host user's reach: the data dir (even one an operator made `0755`) and
//! the layer store are `0700`, so uid 65534 on the host can neither reach nor run it.

mod serve_bin;

use serde_json::json;
use serve_bin::Server;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const MASTER: &str = "snapshot-setuid-test-master-key-0123456789";

/// Every `planted` file in a stored layer (`layers/<digest>/planted`).
fn planted_in_layers(data: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data.join("layers"))
        .expect("layers")
        .flatten()
        .map(|e| e.path().join("planted"))
        .filter(|p| p.is_file())
        .collect()
}

/// Runs `script` (`$0` is `arg`) in a shell as uid/gid 65534 with no groups: a local
/// user with no rights. (Through a shell: `setpriv` still holds root's capabilities
/// until its own exec, which would then resolve the path as root.)
fn as_nobody(script: &str, arg: &str) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["/bin/sh", "-c", script, arg])
        .output()
        .expect("setpriv")
}

#[test]
fn a_planted_setuid_root_program_is_kept_for_the_sandbox_and_unreachable_on_the_host() {
    let top = tempfile::tempdir().expect("tempdir");
    let top_dir = top.path().canonicalize().expect("canonical");
    // The parent any user may enter, and a data dir made loose beforehand (`mkdir`
    // with the usual umask, as an operator would).
    std::fs::set_permissions(&top_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let data = top_dir.join("data");
    std::fs::create_dir(&data).expect("data dir");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let server = Server::start(&data, Some(MASTER));
    let (mut sandboxes, mut snapshot) = (Vec::new(), None);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let id =
            server.create_sandbox(MASTER, &json!({"name": "suid", "vcpu": 1, "memoryMb": 128}));
        sandboxes.push(id.clone());
        let (code, out) = server.exec(
            MASTER,
            &id,
            &[
                "/bin/sh",
                "-c",
                "cp /usr/bin/id /planted && chmod 4755 /planted && stat -c %a:%u /planted",
            ],
        );
        assert_eq!((code, out.trim()), (0, "4755:0"));
        let reply = server.request(
            "POST",
            &format!("/v2/sandboxes/{id}/snapshots"),
            MASTER,
            Some(&json!({"name": "suid"})),
        );
        assert!(matches!(reply.status, 200 | 201), "{}", reply.text());
        let snap = reply.json()["data"]["id"]
            .as_str()
            .expect("snapshot id")
            .to_owned();
        snapshot = Some(snap.clone());

        // The host's copy is the tenant's file as it is: root's, setuid.
        let planted = planted_in_layers(&data);
        assert_eq!(planted.len(), 1, "{planted:?}");
        let meta = std::fs::metadata(&planted[0]).expect("planted");
        assert_eq!((meta.mode() & 0o7777, meta.uid()), (0o4755, 0));
        // But no other user gets to it.
        let path = planted[0].to_str().expect("utf-8 path");
        let run = as_nobody("exec \"$0\"", path);
        let said = String::from_utf8_lossy(&run.stdout);
        assert!(
            !run.status.success() && !said.contains("euid=0"),
            "uid 65534 ran the planted program: {said}"
        );
        let reach = as_nobody("test -e \"$0\"", path);
        assert!(!reach.status.success(), "uid 65534 can reach {path}");
        // The dirs above are root's alone.
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").mode() & 0o7777;
        assert_eq!(mode(&data), 0o700, "the data dir");
        assert_eq!(mode(&data.join("layers")), 0o700, "the layer store");

        // Fidelity: a sandbox made from the snapshot still has the setuid program.
        let clone = server.create_sandbox(
            MASTER,
            &json!({"name": "suid-clone", "vcpu": 1, "memoryMb": 128, "snapshotId": snap}),
        );
        sandboxes.push(clone.clone());
        let (code, out) = server.exec(MASTER, &clone, &["/bin/stat", "-c", "%a:%u", "/planted"]);
        assert_eq!((code, out.trim()), (0, "4755:0"));
    }));
    for id in &sandboxes {
        server.destroy(MASTER, id);
    }
    if let Some(snap) = snapshot {
        let _ = server.try_request("DELETE", &format!("/v2/snapshots/{snap}"), MASTER, None);
    }
    drop(server);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
