//! Sandboxes from a pulled image in the OpenRelay and Inngest dialects, through the real
//! server: an OpenRelay `template` may name a stored image, and Inngest's create takes
//! the extension field `image`; an unknown image is each dialect's client error.

mod openrelay;
mod registry;
mod serve_bin;

use openrelay::{code, Or};
use registry::{sandboxd, Registry};
use serde_json::json;

#[test]
fn openrelay_templates_and_inngest_creates_name_a_stored_image() {
    let (_work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    registry.push_layout(&layouts.join("good"), "test/app:v1");
    let reference = registry.reference("test/app:v1");
    let data = tempfile::tempdir().expect("tempdir");
    let out = sandboxd(data.path(), &["images", "pull", &reference]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let or = Or::start(data.path(), &[]);

    // OpenRelay: the template names the image.
    let view = or.create(&json!({ "template": reference }));
    assert_eq!(view["template"], json!(reference));
    let id = view["id"].as_str().expect("id").to_owned();
    let r = or.post(
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["/usr/bin/cat", "/etc/greeting"]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["stdout"], "hello from the image\n");
    or.delete(&id);
    let missing = json!({ "template": registry.reference("test/nope:v1") });
    assert_eq!(
        code(&or.post("/v1/sandboxes", &missing), 400),
        "TEMPLATE_NOT_FOUND"
    );
    // An image is no workspace template to delete.
    let r = or.send(
        "DELETE",
        &format!("/v1/sandbox-templates/{}", urlencode(&reference)),
        &[],
        "",
    );
    assert!(
        r.status >= 400 && r.status < 500,
        "{} {}",
        r.status,
        r.text()
    );

    // Inngest: the extension field `image`, reported back as `imageRef`.
    let key = openrelay::MASTER;
    let body = json!({"name": "from-image", "vcpu": 1, "memoryMb": 512, "image": reference});
    let reply = or.server.request("POST", "/v2/sandboxes", key, Some(&body));
    assert_eq!(reply.status, 201, "{}", reply.text());
    let data = &reply.json()["data"];
    assert_eq!(data["imageRef"], json!(reference));
    let id = data["id"].as_str().expect("id").to_owned();
    let (exit, stdout) = or.server.exec(key, &id, &["/usr/bin/cat", "/etc/greeting"]);
    assert_eq!((exit, stdout.as_str()), (0, "hello from the image\n"));
    // The same create again is the SDK's retry: the same sandbox.
    let again = or.server.request("POST", "/v2/sandboxes", key, Some(&body));
    assert_eq!(again.status, 200, "{}", again.text());
    or.server.destroy(key, &id);
    let body = json!({"name": "nope", "vcpu": 1, "memoryMb": 512,
                      "image": registry.reference("test/nope:v1")});
    let reply = or.server.request("POST", "/v2/sandboxes", key, Some(&body));
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(reply.json()["errors"][0]["code"], "invalid_field_format");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn run_pulls_a_missing_image_and_runs_in_it() {
    let (_work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    registry.push_layout(&layouts.join("good"), "test/run:v1");
    let reference = registry.reference("test/run:v1");
    let data = tempfile::tempdir().expect("tempdir");
    let run = |image: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
            .args([
                "run",
                "--wait-cleanup",
                "--network",
                "none",
                "--image",
                image,
                "--data-dir",
            ])
            .arg(data.path())
            .args(["--", "/usr/bin/cat", "/etc/greeting"])
            .output()
            .expect("sandboxd run")
    };
    let out = run(&reference);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from the image\n"
    );
    let listed = sandboxd(data.path(), &["images", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&reference));
    // Stored now: a second run pulls nothing.
    let out = run(&reference);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("pulling"));

    let out = run("127.0.0.1:1/nope:v1");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pulling it failed"), "{err}");
}
