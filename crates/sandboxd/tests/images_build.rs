//! Dockerfile builds end to end (`sandboxd templates build NAME --file`): from the
//! built-in `default`, from an image pulled from a real registry on loopback, and from
//! a built template; what the result holds seen from inside a sandbox made from it;
//! the step cache (an unchanged rebuild runs nothing and stores no layer, a changed
//! COPY rebuilds from there); refusals with nothing stored and nothing left running;
//! the export read back by skopeo.

mod openrelay;
mod registry;
mod serve_bin;

use openrelay::{Or, MASTER};
use registry::{run, Registry};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Output};

fn tool(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(args)
        .env("SANDBOXD_DATA_DIR", data)
        .env_remove("SANDBOXD_KEY")
        .output()
        .expect("sandboxd")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Builds template `name` from `dir/Dockerfile` with `dir` as the context.
fn build(data: &Path, name: &str, dir: &Path, extra: &[&str]) -> Output {
    let file = dir.join("Dockerfile");
    let mut args = vec!["templates", "build", name, "--file", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    tool(data, &args)
}

fn build_ok(data: &Path, name: &str, dir: &Path, extra: &[&str]) -> String {
    let out = build(data, name, dir, extra);
    assert!(out.status.success(), "build {name}: {}", text(&out));
    text(&out)
}

/// Runs `script` with `shell -c` in a sandbox of `image` (cwd: the image's); stdout.
fn inside(data: &Path, image: &str, shell: &str, script: &str) -> String {
    let out = tool(
        data,
        &[
            "run",
            "--wait-cleanup",
            "--image",
            image,
            "--",
            shell,
            "-c",
            script,
        ],
    );
    assert!(out.status.success(), "run in {image}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn layer_count(data: &Path) -> usize {
    std::fs::read_dir(data.join("layers"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .count()
}

fn inspect(data: &Path, name: &str) -> serde_json::Value {
    let out = tool(data, &["images", "inspect", name]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).expect("inspect json")
}

/// Nothing of a build is left running: no sandbox state, no mount under `data`, no
/// temporary image record.
fn assert_nothing_left(data: &Path) {
    let sandboxes: Vec<_> = std::fs::read_dir(data.join("sandboxes"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(
        sandboxes,
        Vec::<std::ffi::OsString>::new(),
        "sandbox dirs left"
    );
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let needle = data.to_string_lossy().into_owned();
    let mounts: Vec<&str> = mountinfo.lines().filter(|l| l.contains(&needle)).collect();
    assert_eq!(mounts, Vec::<&str>::new(), "mounts left");
    let listed = text(&tool(data, &["images", "list"]));
    assert!(!listed.contains("sandboxd-build-"), "{listed}");
}

#[test]
fn from_default_with_every_instruction_cached_and_rebuilt_on_change() {
    let data = tempfile::tempdir().unwrap();
    let ctx = tempfile::tempdir().unwrap();
    let c = ctx.path();
    std::fs::write(c.join("app.txt"), "app v1\n").unwrap();
    std::fs::create_dir(c.join("conf")).unwrap();
    std::fs::write(c.join("conf/a.conf"), "a=1\n").unwrap();
    std::fs::write(
        c.join("Dockerfile"),
        "# a template from the built-in image\n\
         ARG BASE=default\n\
         FROM ${BASE}\n\
         ARG WHO=world\n\
         ENV APP_MODE=prod \\\n    GREETING=\"hello there\"\n\
         LABEL org.example.team=sandbox version=1\n\
         WORKDIR /opt/app\n\
         COPY app.txt ./\n\
         COPY conf/ /etc/app/\n\
         RUN echo \"$GREETING $WHO from $(pwd) mode=$APP_MODE\" > ran.txt && echo step-$((40+2))-output\n\
         RUN [\"/bin/sh\", \"-c\", \"id -u > /opt/app/uid.txt\"]\n\
         USER nobody\n\
         CMD [\"/bin/sh\"]\n",
    )
    .unwrap();
    let first = build_ok(
        data.path(),
        "fromdefault",
        c,
        &["--build-arg", "WHO=tester"],
    );
    assert!(first.contains("Step 10/12 (line 12) : RUN ["), "{first}");
    assert!(first.contains("step-42-output"), "{first}");
    assert_eq!(first.matches(" ---> ran").count(), 2, "{first}");
    assert_nothing_left(data.path());

    let got = inside(
        data.path(),
        "fromdefault",
        "/bin/sh",
        "pwd; cat ran.txt app.txt /etc/app/a.conf uid.txt; echo \"$APP_MODE\"",
    );
    assert_eq!(
        got,
        "/opt/app\nhello there tester from /opt/app mode=prod\napp v1\na=1\n0\nprod\n"
    );
    let view = inspect(data.path(), "fromdefault");
    assert_eq!(view["config"]["user"], "nobody");
    assert_eq!(view["config"]["working_dir"], "/opt/app");
    assert_eq!(view["config"]["labels"]["org.example.team"], "sandbox");
    assert_eq!(view["config"]["cmd"][0], "/bin/sh");

    // Unchanged: every step from the cache, no new layer.
    let layers = layer_count(data.path());
    let again = build_ok(
        data.path(),
        "fromdefault",
        c,
        &["--build-arg", "WHO=tester"],
    );
    assert!(!again.contains(" ---> ran"), "{again}");
    assert!(!again.contains("step-42-output"), "{again}");
    assert_eq!(again.matches(" ---> cached").count(), 5, "{again}");
    assert_eq!(layer_count(data.path()), layers);

    // A changed COPY source: that step and every later one again.
    std::fs::write(c.join("app.txt"), "app v2\n").unwrap();
    let changed = build_ok(
        data.path(),
        "fromdefault",
        c,
        &["--build-arg", "WHO=tester"],
    );
    assert_eq!(changed.matches(" ---> ran").count(), 2, "{changed}");
    assert_eq!(changed.matches(" ---> cached").count(), 1, "{changed}");
    assert!(layer_count(data.path()) > layers);
    let got = inside(data.path(), "fromdefault", "/bin/sh", "cat app.txt");
    assert_eq!(got, "app v2\n");

    // Another build argument: the RUNs that see it run again, the rest is cached.
    let other = build_ok(data.path(), "fromdefault", c, &["--build-arg", "WHO=other"]);
    assert_eq!(other.matches(" ---> cached").count(), 3, "{other}");
    assert_eq!(other.matches(" ---> ran").count(), 2, "{other}");
    assert_nothing_left(data.path());
}

#[test]
fn from_a_registry_image_then_from_the_built_template_and_exported() {
    let (work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    registry.push_layout(&layouts.join("good"), "test/base:v1");
    let reference = registry.reference("test/base:v1");
    let data = tempfile::tempdir().unwrap();
    let ctx = work.path().join("ctx");
    std::fs::create_dir(&ctx).unwrap();
    std::fs::write(ctx.join("data.txt"), "payload\n").unwrap();
    // The image has bash but no /bin/sh: JSON-form RUN steps. It is pulled by FROM.
    std::fs::write(
        ctx.join("Dockerfile"),
        format!(
            "FROM {reference}\n\
             ENV MINE=mine\n\
             WORKDIR /srv/app/sub\n\
             RUN [\"/usr/bin/bash\", \"-c\", \"echo built in $PWD with $IMAGE_VAR > built.txt\"]\n\
             COPY --chmod=600 data.txt /data/\n\
             LABEL stage=one\n"
        ),
    )
    .unwrap();
    let out = build_ok(data.path(), "onbase", &ctx, &[]);
    assert!(out.contains("pulling"), "{out}");
    let got = inside(
        data.path(),
        "onbase",
        "/usr/bin/bash",
        "pwd; cat built.txt /data/data.txt /etc/greeting; echo $MINE $IMAGE_VAR; \
         x=$(ls -l /data/data.txt); echo ${x:0:10}",
    );
    assert_eq!(
        got,
        "/srv/app/sub\nbuilt in /srv/app/sub with from-image\npayload\nhello from the image\n\
         mine from-image\n-rw-------\n"
    );

    // The built template as FROM.
    let next = work.path().join("next");
    std::fs::create_dir(&next).unwrap();
    std::fs::write(
        next.join("Dockerfile"),
        "FROM onbase\nRUN [\"/usr/bin/bash\", \"-c\", \"echo more >> built.txt\"]\nLABEL stage=two\n",
    )
    .unwrap();
    build_ok(data.path(), "ontop", &next, &[]);
    let got = inside(
        data.path(),
        "ontop",
        "/usr/bin/bash",
        "cat built.txt; echo $MINE",
    );
    assert_eq!(got, "built in /srv/app/sub with from-image\nmore\nmine\n");

    // Exported, it is an OCI archive skopeo reads, with the build's configuration.
    let archive = work.path().join("ontop.tar");
    let out = tool(
        data.path(),
        &["images", "export", "ontop", archive.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out));
    let config: serde_json::Value = serde_json::from_str(&run(Command::new("skopeo").args([
        "inspect",
        "--config",
        &format!("oci-archive:{}", archive.display()),
    ])))
    .unwrap();
    assert_eq!(config["config"]["WorkingDir"], "/srv/app/sub");
    assert_eq!(config["config"]["Labels"]["stage"], "two");
    let env = config["config"]["Env"].to_string();
    assert!(
        env.contains("MINE=mine") && env.contains("IMAGE_VAR=from-image"),
        "{env}"
    );
    assert_nothing_left(data.path());
}

#[test]
fn bad_dockerfiles_fail_clearly_and_store_nothing() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let ctx = work.path().join("ctx");
    std::fs::create_dir(&ctx).unwrap();
    std::fs::write(work.path().join("secret"), "s").unwrap();
    std::fs::write(ctx.join("ok.txt"), "ok").unwrap();
    std::os::unix::fs::symlink(work.path().join("secret"), ctx.join("link")).unwrap();
    let cases = [
        (
            "FROM default\nRUN true\nEXPOSE 80\n",
            "line 3: EXPOSE is not supported",
        ),
        ("FROM default\nHEALTHCHECK NONE\n", "line 2: HEALTHCHECK"),
        ("FROM default AS build\n", "line 1: FROM … AS"),
        (
            "FROM default\nCOPY ../secret /s\n",
            "leads outside the build context",
        ),
        (
            "FROM default\nCOPY link /s\n",
            "leads outside the build context",
        ),
        ("FROM default\nCOPY /etc/passwd /s\n", "is absolute"),
        (
            "FROM default\nCOPY missing.txt /s\n",
            "not found in the build context",
        ),
        (
            "FROM default\nADD http://127.0.0.1:1/x /x\n",
            "ADD of a URL",
        ),
        ("FROM 127.0.0.1:1/nope:v1\n", "FROM 127.0.0.1:1/nope:v1"),
        (
            "FROM default\nCOPY ok.txt /ok.txt\nRUN echo before-failing && exit 7\n",
            "step 3/3 (Dockerfile line 3) RUN echo before-failing && exit 7: exited with code 7",
        ),
    ];
    for (dockerfile, why) in cases {
        std::fs::write(ctx.join("Dockerfile"), dockerfile).unwrap();
        let out = build(data.path(), "bad", &ctx, &[]);
        assert!(!out.status.success(), "{dockerfile:?} built");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{dockerfile:?}: {err}");
        let listed = text(&tool(data.path(), &["images", "list"]));
        assert!(!listed.contains("bad "), "{dockerfile:?}: {listed}");
        assert_nothing_left(data.path());
    }
    // The failed RUN's output was streamed before the error.
    let out = build(data.path(), "bad", &ctx, &[]);
    assert!(text(&out).contains("before-failing"), "{}", text(&out));
    // The name of a built-in template is refused.
    std::fs::write(ctx.join("Dockerfile"), "FROM default\n").unwrap();
    let out = build(data.path(), "python", &ctx, &[]);
    assert!(text(&out).contains("built in"), "{}", text(&out));
}

#[test]
fn built_beside_a_running_server_and_used_by_the_dialects() {
    let data = tempfile::tempdir().unwrap();
    let or = Or::start(data.path(), &[]);
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(ctx.path().join("hello.txt"), "hello\n").unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM default\nWORKDIR /opt/w\nCOPY hello.txt .\nENV HELLO=world\nRUN echo ran > r.txt\n",
    )
    .unwrap();
    build_ok(data.path(), "beside", ctx.path(), &[]);

    // Inngest (its `image` extension): files, env and the image's cwd.
    let id = or.server.create_sandbox(
        MASTER,
        &json!({"name": "b", "vcpu": 1, "memoryMb": 256, "image": "beside"}),
    );
    let (code, out) = or.server.exec(
        MASTER,
        &id,
        &["/bin/sh", "-c", "pwd; cat hello.txt r.txt; echo $HELLO"],
    );
    assert_eq!((code, out.as_str()), (0, "/opt/w\nhello\nran\nworld\n"));
    or.server.destroy(MASTER, &id);
    // OpenRelay: a template like any image.
    let view = or.create(&json!({"template": "beside"}));
    or.delete(view["id"].as_str().expect("id"));

    // `templates build --from-image`: pulled into the data dir, then an OpenRelay build.
    let (_work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start();
    registry.push_layout(&layouts.join("good"), "test/base:v1");
    let url = format!("http://{}", or.server.addr);
    let out = tool(
        data.path(),
        &[
            "templates",
            "build",
            "fromimage",
            "--from-image",
            &registry.reference("test/base:v1"),
            "--url",
            &url,
            "--key",
            MASTER,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let listed = or.get("/v1/sandbox-templates").text();
    assert!(listed.contains("\"fromimage\""), "{listed}");

    // That workspace template (a snapshot over the image) as a Dockerfile's FROM.
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM fromimage\nRUN [\"/usr/bin/bash\", \"-c\", \"echo on-snapshot > /x.txt\"]\n",
    )
    .unwrap();
    build_ok(data.path(), "onsnapshot", ctx.path(), &[]);
    let got = inside(
        data.path(),
        "onsnapshot",
        "/usr/bin/bash",
        "cat /x.txt /etc/greeting; echo $IMAGE_VAR",
    );
    assert_eq!(got, "on-snapshot\nhello from the image\nfrom-image\n");
}

#[test]
fn an_interrupted_build_destroys_its_step_sandbox_and_stores_nothing() {
    use std::io::BufRead;
    let data = tempfile::tempdir().unwrap();
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM default\nRUN echo step-is-running && sleep 600\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(["templates", "build", "cut", "--file"])
        .arg(ctx.path().join("Dockerfile"))
        .env("SANDBOXD_DATA_DIR", data.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sandboxd");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // Wait until the step runs inside its sandbox.
    loop {
        let line = lines.next().expect("output ended early").unwrap();
        if line == "step-is-running" {
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("interrupted"), "{err}");
    assert!(!text(&tool(data.path(), &["images", "list"])).contains("cut "));
    assert_nothing_left(data.path());
}

#[test]
fn run_after_user_runs_as_that_user() {
    let data = tempfile::tempdir().unwrap();
    let ctx = tempfile::tempdir().unwrap();
    let c = ctx.path();
    std::fs::write(
        c.join("Dockerfile"),
        "FROM default\n\
         RUN id -u > /tmp/root-uid\n\
         USER 4321:4321\n\
         RUN echo \"step-uid-$(id -u)-gid-$(id -g)\" && cp /tmp/root-uid /tmp/copied\n",
    )
    .unwrap();
    let out = build_ok(data.path(), "asuser", c, &[]);
    assert!(out.contains("step-uid-4321-gid-4321"), "{out}");
    let got = inside(
        data.path(),
        "asuser",
        "/bin/sh",
        "id -u; cat /tmp/root-uid; stat -c %u /tmp/copied",
    );
    assert_eq!(got, "4321\n0\n4321\n");
    assert_nothing_left(data.path());
}
