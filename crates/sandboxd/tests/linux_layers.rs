//! Snapshots as layers: capture a sandbox's writes, start a new sandbox on top of them.

mod common;

use common::*;
use sandboxd_runtime::Runtime;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

#[test]
fn captured_layer_carries_writes_into_a_new_sandbox() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let first = rt.start(&spec("default")).expect("start");
    let script = "id -u && echo snap > /etc/snapfile && mkdir -p /opt/d && echo x > /opt/d/f && chmod 4755 /opt/d/f && rm /etc/hostname";
    assert_eq!(agent_sh(&first, script), (Some(0), "0\n".to_string()));
    let layer = rt.capture_layer(&first).expect("capture");
    assert!(rt.is_alive(&first), "the sandbox keeps running");
    assert!(
        !rt.cgroups().is_frozen(first.id),
        "capture thaws what it froze"
    );
    rt.destroy(&first).expect("destroy first");
    assert_gone(&rt, data.path(), &first);

    let stored = data.path().join("layers").join(&layer.digest);
    let snap = std::fs::metadata(stored.join("etc/snapfile")).expect("snapfile in layer");
    assert_eq!(
        (snap.uid(), snap.gid()),
        (0, 0),
        "ownership shifted back to 0-based ids"
    );
    assert_eq!(
        std::fs::metadata(stored.join("opt/d/f")).expect("f").mode() & 0o7777,
        0o4755
    );
    assert!(std::fs::symlink_metadata(stored.join("etc/hostname"))
        .expect("whiteout")
        .file_type()
        .is_char_device());

    let mut next = spec("default");
    next.extra_layers = vec![layer.digest.clone()];
    let second = rt.start(&next).expect("start on the layer");
    let check = "cat /etc/snapfile; test -e /etc/hostname || echo gone; stat -c '%u %a' /opt/d/f";
    assert_eq!(
        agent_sh(&second, check),
        (Some(0), "snap\ngone\n0 4755\n".to_string())
    );
    rt.destroy(&second).expect("destroy second");
    assert_gone(&rt, data.path(), &second);
    rt.delete_layer(&layer.digest).expect("delete layer");
    assert!(!stored.exists());
}

#[test]
fn agent_answers_health_and_root_writes_etc_through_exec() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let handle = rt.start(&spec("default")).expect("start");
    let client = sandboxd_agent_protocol::AgentClient::new(handle.agent_socket.clone());
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let health = tokio.block_on(client.health()).expect("health");
    assert_eq!((health.protocol, health.pid), (1, 1));
    let (code, out) = agent_sh(
        &handle,
        "echo ok >> /etc/passwd && tail -n1 /etc/passwd && bash -c 'echo $((6*7))'",
    );
    assert_eq!((code, out.as_str()), (Some(0), "ok\n42\n"));
    rt.destroy(&handle).expect("destroy");
    assert_gone(&rt, data.path(), &handle);
}
