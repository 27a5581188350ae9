//! Pulls from a registry behind htpasswd auth: anonymous and wrong credentials are
//! refused with an error naming `sandboxd registry login`; after a login the pull
//! works; the stored password is nowhere in clear in the database files.

mod registry;

use registry::{login, sandboxd, text, Registry};

const USER: &str = "tester";
const PASSWORD: &str = "pw-Zq8vX3-in-clear-never";

#[test]
fn pulls_from_an_htpasswd_registry_need_a_login_whose_password_is_sealed() {
    let (_work, _outside, layouts) = registry::test_layouts();
    let registry = Registry::start_with_auth(USER, PASSWORD);
    registry.push_layout_as(
        &layouts.join("good"),
        "test/private:v1",
        Some(&format!("{USER}:{PASSWORD}")),
    );
    let host = format!("127.0.0.1:{}", registry.port);
    let reference = registry.reference("test/private:v1");
    let data = tempfile::tempdir().expect("tempdir");

    let out = sandboxd(data.path(), &["images", "pull", &reference]);
    assert!(!out.status.success(), "an anonymous pull worked");
    assert!(
        text(&out).contains(&format!("sandboxd registry login {host}")),
        "{}",
        text(&out)
    );

    let out = login(data.path(), &host, &format!("{USER}\nwrong-password\n"));
    assert!(out.status.success(), "{}", text(&out));
    let out = sandboxd(data.path(), &["images", "pull", &reference]);
    assert!(!out.status.success(), "a wrong password worked");
    assert!(
        text(&out).contains("refused the credentials"),
        "{}",
        text(&out)
    );

    let out = login(data.path(), &host, &format!("{USER}\n{PASSWORD}\n"));
    assert!(out.status.success(), "{}", text(&out));
    let out = sandboxd(data.path(), &["images", "pull", &reference]);
    assert!(out.status.success(), "{}", text(&out));
    let listed = sandboxd(data.path(), &["registry", "list"]);
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        format!("{host}  {USER}\n")
    );

    // The password is in no file of the data directory's store, in clear.
    let mut checked = 0;
    for entry in std::fs::read_dir(data.path()).expect("data dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("sandboxd.db") {
            let bytes = std::fs::read(entry.path()).expect("db file");
            let found = bytes
                .windows(PASSWORD.len())
                .any(|w| w == PASSWORD.as_bytes());
            assert!(!found, "{name} holds the password in clear");
            checked += 1;
        }
    }
    assert!(checked > 0, "no database file found");

    let out = sandboxd(data.path(), &["registry", "logout", &host]);
    assert!(out.status.success(), "{}", text(&out));
    let listed = sandboxd(data.path(), &["registry", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "");
}
