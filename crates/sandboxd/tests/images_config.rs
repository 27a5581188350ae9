//! An image's configuration seen from inside its sandboxes, in all three dialects and
//! `sandboxd run`: `User` (a name through the image's /etc/passwd and /etc/group, a
//! numeric `uid:gid` with no passwd at all, an unknown name refused at create), `Env`
//! and `WorkingDir`; and an image with no shell and no libc (one static binary): exec
//! of an absolute path and the files API work, shell-line commands get a clear 4xx.
//! The probe in the images is a static binary printing its ids, cwd and variables.

mod openrelay;
mod registry;
mod runzivo_api;
mod serve_bin;

use openrelay::Or;
use registry::{sandboxd, Registry};
use serde_json::json;
use std::path::Path;

/// Pushes the test layouts `names` and pulls them into `data`; returns their references.
fn pull_all(registry: &Registry, layouts: &Path, data: &Path, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|name| {
            let tag = format!("test/{name}:v1");
            registry.push_layout(&layouts.join(name), &tag);
            let reference = registry.reference(&tag);
            let out = sandboxd(data, &["images", "pull", &reference]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            reference
        })
        .collect()
}

const APP_USER: &str = "uid=1234 gid=2345 cwd=/srv/app groups=2345,3456\nIMAGE_VAR=from-image\n";

#[test]
fn openrelay_inngest_and_run_honour_user_env_and_workdir() {
    let (_work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    let data = tempfile::tempdir().expect("tempdir");
    let refs = pull_all(
        &registry,
        &layouts,
        data.path(),
        &["user", "numeric", "ghost", "noshell"],
    );
    let (user, numeric, ghost, noshell) = (&refs[0], &refs[1], &refs[2], &refs[3]);

    // `sandboxd run` (before the server: one process at a time on the data dir is
    // not needed, but it keeps this part independent of the server).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args([
            "run",
            "--wait-cleanup",
            "--network",
            "none",
            "--image",
            user,
            "--data-dir",
        ])
        .arg(data.path())
        .args(["--", "/probe", "IMAGE_VAR"])
        .output()
        .expect("sandboxd run");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        APP_USER,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let or = Or::start(data.path(), &[]);
    let probe = |id: &str| {
        let r = or.post(
            &format!("/v1/sandboxes/{id}/exec"),
            &json!({"argv": ["/probe", "IMAGE_VAR"]}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["stdout"].as_str().expect("stdout").to_owned()
    };

    // OpenRelay: a named user, a numeric one with no /etc at all, an unknown name.
    let id = or.create(&json!({ "template": user }))["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(probe(&id), APP_USER);
    // HOME is the user's, from the image's passwd.
    let r = or.post(
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["/probe", "HOME"]}),
    );
    assert!(
        r.json()["stdout"]
            .as_str()
            .unwrap_or_default()
            .ends_with("\nHOME=/home/app\n"),
        "{}",
        r.text()
    );
    // A command that names its cwd keeps it; the user stays.
    let r = or.post(
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["/probe"], "cwd": "/tmp"}),
    );
    assert_eq!(
        r.json()["stdout"],
        "uid=1234 gid=2345 cwd=/tmp groups=2345,3456\n"
    );
    or.delete(&id);
    let id = or.create(&json!({ "template": numeric }))["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(
        probe(&id),
        "uid=4321 gid=8765 cwd=/srv/app groups=8765\nIMAGE_VAR=from-image\n"
    );
    or.delete(&id);
    let r = or.post("/v1/sandboxes", &json!({ "template": ghost }));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text()
            .contains("\\\"ghost\\\" is not in the image's /etc/passwd"),
        "{}",
        r.text()
    );
    assert!(or.active().is_empty(), "a refused create left a sandbox");

    // OpenRelay, no shell: argv works, the files API works, `cmd` is a clear 400.
    let id = or.create(&json!({ "template": noshell }))["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(
        probe(&id),
        "uid=0 gid=0 cwd=/srv/app groups=\nIMAGE_VAR=from-image\n"
    );
    let r = or.post(
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"cmd": "echo hi"}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("this sandbox's image has no /bin/sh"),
        "{}",
        r.text()
    );
    or.delete(&id);

    // Inngest: the extension field `image`; files on the no-shell image.
    let key = openrelay::MASTER;
    let create = |name: &str, image: &str| {
        let body = json!({"name": name, "vcpu": 1, "memoryMb": 512, "image": image});
        or.server.request("POST", "/v2/sandboxes", key, Some(&body))
    };
    let reply = create("as-app", user);
    assert_eq!(reply.status, 201, "{}", reply.text());
    let id = reply.json()["data"]["id"].as_str().expect("id").to_owned();
    let (exit, stdout) = or.server.exec(key, &id, &["/probe", "IMAGE_VAR"]);
    assert_eq!((exit, stdout.as_str()), (0, APP_USER));
    or.server.destroy(key, &id);
    let reply = create("ghost", ghost);
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(reply.text().contains("ghost"), "{}", reply.text());
    let id = or.server.create_sandbox(
        key,
        &json!({"name": "bare", "vcpu": 1, "memoryMb": 512, "image": noshell}),
    );
    let files = format!("/v2/sandboxes/{id}/files?path=/tmp/note");
    let up = serve_bin::http(
        or.server.addr,
        "PUT",
        &files,
        &[("authorization", format!("Bearer {key}"))],
        "written by the files API",
    );
    assert!(up.status < 300, "{} {}", up.status, up.text());
    let down = or.server.request("GET", &files, key, None);
    assert_eq!(down.status, 200, "{}", down.text());
    assert_eq!(down.text(), "written by the files API");
    or.server.destroy(key, &id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runzivo_honours_the_image_user_and_names_a_missing_bash() {
    let (_work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    let s = runzivo_api::Server::start(30);
    let refs = pull_all(
        &registry,
        &layouts,
        s.data_dir(),
        &["user", "ghost", "noshell"],
    );
    let view = s.create_with(&json!({ "image": refs[0] })).await;
    let id = view["id"].as_str().expect("id");
    // Runzivo's exec always names its cwd (`/workspace` by default).
    assert_eq!(
        s.sh(id, "/probe IMAGE_VAR; echo \"bash uid $UID\"").await,
        "uid=1234 gid=2345 cwd=/workspace groups=2345,3456\nIMAGE_VAR=from-image\nbash uid 1234\n"
    );

    // Leaving uid 0 left every capability behind.
    assert_eq!(
        s.sh(
            id,
            "while read -r k v; do [ \"$k\" = CapEff: ] && echo \"$v\"; done < /proc/self/status; true"
        )
        .await,
        "0000000000000000\n"
    );

    // The terminal's shell runs as the image's user too.
    let tickets = s.path(&format!("/{id}/terminal/tickets"));
    let issued = s
        .call("POST", &tickets, Some(&s.keys.writer), None, "")
        .await;
    assert_eq!(issued.status, 201);
    let ticket = issued.json()["ticket"].as_str().expect("ticket").to_owned();
    let url = format!(
        "ws://{}{}?ticket={ticket}",
        s.addr,
        s.path(&format!("/{id}/terminal"))
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("terminal");
    use futures_util::{SinkExt, StreamExt};
    ws.send(tokio_tungstenite::tungstenite::Message::Binary(
        "echo uid-$UID-gid-$(/probe)\n".into(),
    ))
    .await
    .expect("send");
    let mut seen = String::new();
    while !seen.contains("uid-1234-gid-uid=1234 gid=2345") {
        let next = tokio::time::timeout(std::time::Duration::from_secs(30), ws.next()).await;
        match next.expect("terminal output within 30 s") {
            Some(Ok(tokio_tungstenite::tungstenite::Message::Binary(d))) => {
                seen.push_str(&String::from_utf8_lossy(&d))
            }
            other => panic!("unexpected {other:?} after {seen:?}"),
        }
    }
    drop(ws);

    let reply = s
        .json("POST", &s.path(""), &json!({ "image": refs[1] }))
        .await;
    reply.expect(400, "invalid_request");
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("\"ghost\" is not in the image's /etc/passwd"),
        "{}",
        reply.json()
    );

    let view = s.create_with(&json!({ "image": refs[2] })).await;
    let id = view["id"].as_str().expect("id");
    let reply = s
        .json(
            "POST",
            &s.path(&format!("/{id}/exec")),
            &json!({ "cmd": "echo hi" }),
        )
        .await;
    reply.expect(400, "invalid_request");
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("this sandbox's image has no /bin/bash"),
        "{}",
        reply.json()
    );
}

#[test]
fn inngest_creates_start_from_the_workspace_default_image() {
    let (_work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    let data = tempfile::tempdir().expect("tempdir");
    let refs = pull_all(&registry, &layouts, data.path(), &["user"]);
    let or = Or::start(data.path(), &[]);
    let key = openrelay::MASTER;
    let set = |image: &str| sandboxd(data.path(), &["workspace", "set-image", "default", image]);

    let out = set(&registry.reference("test/nope:v1"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pull it first"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = set(&refs[0]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), refs[0]);

    // A create that names no image starts from it, and says so.
    let body = json!({"name": "defaulted", "vcpu": 1, "memoryMb": 512});
    let reply = or.server.request("POST", "/v2/sandboxes", key, Some(&body));
    assert_eq!(reply.status, 201, "{}", reply.text());
    let data_view = &reply.json()["data"];
    assert_eq!(data_view["imageRef"], json!(refs[0]));
    let id = data_view["id"].as_str().expect("id").to_owned();
    let (exit, stdout) = or.server.exec(key, &id, &["/probe", "IMAGE_VAR"]);
    assert_eq!((exit, stdout.as_str()), (0, APP_USER));
    let got = or
        .server
        .request("GET", &format!("/v2/sandboxes/{id}"), key, None);
    assert_eq!(got.json()["data"]["imageRef"], json!(refs[0]));
    or.server.destroy(key, &id);

    // Back to the built-in image.
    let out = set("default");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "default");
    let body = json!({"name": "builtin", "vcpu": 1, "memoryMb": 512});
    let reply = or.server.request("POST", "/v2/sandboxes", key, Some(&body));
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.json()["data"]["imageRef"], "default");
    let id = reply.json()["data"]["id"].as_str().expect("id").to_owned();
    or.server.destroy(key, &id);
}
