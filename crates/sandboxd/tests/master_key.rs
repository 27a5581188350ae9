//! The master key as an attacker sees it: a key that is not long hex has no Inngest SDK
//! form (once, that form was sha256 of an empty buffer, a bearer anyone could send), and
//! a changed master key stops the old one and its SDK form at the next start.

mod serve_bin;

use sandboxd_dialect_inngest::signing_key::sdk_bearer_for;
use serve_bin::Server;

/// sha256 of an empty buffer: what the SDK form of a non-hex key used to be.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// One list route per dialect, all in the master key's workspace.
const LISTS: [&str; 3] = [
    "/v2/sandboxes",
    "/v1/sandboxes",
    "/v1/customer/tenants/default/sandboxes",
];

fn status(server: &Server, key: &str, path: &str) -> u16 {
    server.request("GET", path, key, None).status
}

fn assert_all(server: &Server, key: &str, want: u16, what: &str) {
    for path in LISTS {
        assert_eq!(status(server, key, path), want, "{what} on {path}");
    }
}

#[test]
fn a_master_key_that_is_not_hex_registers_no_guessable_sdk_form() {
    let dir = tempfile::tempdir().expect("temp dir");
    let master = "any-non-hex-master-key-123";
    let server = Server::start(dir.path(), Some(master));
    assert_all(&server, master, 200, "the master key");
    assert_all(&server, EMPTY_SHA256, 401, "sha256 of nothing");
    // A key whose secret part is hex only at its start hashed to a short buffer.
    for near in [
        format!("signkey-prod-{EMPTY_SHA256}"),
        "signkey-prod-e3b0c44298fc".into(),
    ] {
        assert_all(&server, &near, 401, "a near-miss bearer");
    }
}

#[test]
fn a_changed_master_key_revokes_the_old_one_and_its_sdk_form() {
    let dir = tempfile::tempdir().expect("temp dir");
    let old = "signkey-prod-00112233445566778899aabbccddeeff";
    let new = "signkey-prod-ffeeddccbbaa99887766554433221100";
    let (old_sdk, new_sdk) = (sdk_bearer_for(old).unwrap(), sdk_bearer_for(new).unwrap());

    let server = Server::start(dir.path(), Some(old));
    assert_all(&server, old, 200, "the master key");
    assert_all(&server, &old_sdk, 200, "its SDK form");
    drop(server);

    let server = Server::start(dir.path(), Some(new));
    assert_all(&server, new, 200, "the new master key");
    assert_all(&server, &new_sdk, 200, "the new SDK form");
    assert_all(&server, old, 401, "the old master key");
    assert_all(&server, &old_sdk, 401, "the old SDK form");
    drop(server);

    // Without a master key, none is left.
    let server = Server::start(dir.path(), None);
    assert_all(&server, new, 401, "a master key no longer configured");
    drop(server);

    // Configured again, the old key is back (and only it).
    let server = Server::start(dir.path(), Some(old));
    assert_all(&server, &old_sdk, 200, "the old SDK form, configured again");
    assert_all(&server, &new_sdk, 401, "the other key");
}

#[test]
fn a_key_made_with_keys_create_can_be_configured_as_the_master_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8 path");
    let out = serve_bin::cli(
        &["keys", "create", "--prefix", "or_", "--data-dir", data],
        "",
    );
    let key = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    // Once refused with "already registered as an ordinary key": the server did not start.
    let server = Server::start(dir.path(), Some(&key));
    assert_all(&server, &key, 200, "the key as master");
}
