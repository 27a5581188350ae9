//! Egress networking through a real `sandboxd serve` whose resolver is a fake "internet"
//! host in a network namespace this test makes: an OpenRelay `egress` deny, a workspace
//! policy set with `sandboxd network-policy` applied to Inngest sandboxes, and the API
//! on loopback unreachable from inside. No traffic leaves the machine.

mod fakenet;
mod openrelay;
mod serve_bin;

use fakenet::{link_exists, FakeNet, PROBE};
use openrelay::{Or, MASTER};
use serde_json::json;

/// "ok HOST DATA", "err HOST ERROR" or "noname ERROR", from inside sandbox `id`.
fn probe(or: &Or, id: &str, host: &str, port: u16) -> String {
    let port = port.to_string();
    let (code, out) = or
        .server
        .exec(MASTER, id, &["/usr/bin/python3", "-c", PROBE, host, &port]);
    assert_eq!(code, 0, "probe failed: {out}");
    out.trim().to_owned()
}

#[test]
fn policies_through_the_apis_and_cli_hold_inside_sandboxes() {
    let fake = FakeNet::new();
    let data = tempfile::tempdir().expect("tempdir");
    let resolver = fake.addr(2);
    // Declared after `fake`, so its sandboxes are deleted before the fake host goes.
    let or = Or::start(data.path(), &[("SANDBOXD_RESOLVERS", &resolver)]);
    let api_port = or.server.addr.port();

    // OpenRelay: the sandbox's own layer denies .3.
    let v = or.create(&json!({"template": "default", "egress": {"deny": [fake.addr(3)]}}));
    let a = v["id"].as_str().expect("id").to_owned();
    // Its veth, seen from inside (the host side's name is the sandbox's id only on a
    // cold start: a wired warm entry's link keeps the entry's name).
    let (code, links) = or.server.exec(MASTER, &a, &["/bin/ls", "/sys/class/net"]);
    assert_eq!(code, 0, "{links}");
    assert!(
        links.split_whitespace().any(|l| l != "lo"),
        "no veth for an egress sandbox: {links}"
    );
    assert_eq!(
        probe(&or, &a, &fake.addr(2), 8080),
        format!("ok {} hello", fake.addr(2))
    );
    assert_eq!(
        probe(&or, &a, "good.test", 8080),
        format!("ok {} hello", fake.addr(2))
    );
    assert!(
        probe(&or, &a, &fake.addr(3), 8080).starts_with("err"),
        "the denied CIDR is reachable"
    );
    let api = probe(&or, &a, "127.0.0.1", api_port);
    assert!(
        api.starts_with("err"),
        "the sandboxd API on loopback is reachable: {api}"
    );

    // The workspace's policy, set with the CLI, applies to Inngest sandboxes (no request
    // field): bad.test and .3 denied, the rest of the fake host allowed.
    let dir = data.path().to_str().expect("utf-8");
    let out = serve_bin::cli(
        &[
            "network-policy",
            "set",
            "--workspace",
            "default",
            "--allow",
            &format!("{}.0/29", fake.prefix),
            "--deny",
            "bad.test",
            "--deny",
            &fake.addr(3),
            "--data-dir",
            dir,
        ],
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = serve_bin::cli(
        &[
            "network-policy",
            "show",
            "--workspace",
            "default",
            "--data-dir",
            dir,
        ],
        "",
    );
    let expected = format!(
        "allow {}.0/29\ndeny bad.test\ndeny {}/32\n",
        fake.prefix,
        fake.addr(3)
    );
    assert_eq!(String::from_utf8_lossy(&shown.stdout), expected);
    let b = or.server.create_sandbox(
        MASTER,
        &json!({"name": "ws-policy", "vcpu": 1, "memoryMb": 256}),
    );
    assert_eq!(
        probe(&or, &b, "good.test", 8080),
        format!("ok {} hello", fake.addr(2))
    );
    assert!(
        probe(&or, &b, &fake.addr(3), 8080).starts_with("err"),
        "workspace-denied CIDR reachable"
    );
    let bad = probe(&or, &b, "bad.test", 8080);
    assert!(
        bad.starts_with(&format!("err {}", fake.addr(4))),
        "bad.test resolves but must not connect: {bad}"
    );
    assert!(
        probe(&or, &b, "127.0.0.1", api_port).starts_with("err"),
        "the API is reachable from b"
    );

    // network mode none: only loopback, no veth.
    let v = or.create(&json!({"template": "default", "network": {"mode": "none"}}));
    let c = v["id"].as_str().expect("id").to_owned();
    assert!(!link_exists(&c), "a network-none sandbox has a veth");
    assert!(probe(&or, &c, &fake.addr(2), 8080).starts_with("err"));

    for id in [&a, &c] {
        or.delete(id);
    }
    or.server.destroy(MASTER, &b);
    for id in [&a, &b, &c] {
        assert!(!link_exists(id), "veth of {id} left behind");
    }
    let cleared = serve_bin::cli(
        &[
            "network-policy",
            "clear",
            "--workspace",
            "default",
            "--data-dir",
            dir,
        ],
        "",
    );
    assert!(cleared.status.success());
}
