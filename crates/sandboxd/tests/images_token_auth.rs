//! The bearer-token challenge flow against Debian's real `docker-registry` configured
//! for token auth: the registry answers 401 with a `Bearer realm=…,service=…,scope=…`
//! challenge, and a token server started by the test (ES256 JWTs signed with a key
//! whose certificate the registry trusts) issues the tokens. Public repositories pull
//! anonymously (an anonymous token); a private one is refused until `sandboxd registry
//! login`, wrong credentials are refused by name, and the right ones are exchanged for
//! a token that pulls.

mod registry;

use registry::token::TokenServer;
use registry::{login, sandboxd, text, Registry};

const USER: &str = "tok-user";
const PASSWORD: &str = "tok-pw-7Hq2-never-in-clear";

#[test]
fn pulls_follow_the_bearer_token_challenge() {
    let (work, _outside, layouts) = registry::test_layouts();
    let tokens = TokenServer::start(work.path(), USER, PASSWORD);
    let registry = Registry::start_with_tokens(&tokens);
    let creds = format!("{USER}:{PASSWORD}");
    registry.push_layout_as(&layouts.join("good"), "public/app:v1", Some(&creds));
    registry.push_layout_as(&layouts.join("good"), "team/private:v1", Some(&creds));
    let host = format!("127.0.0.1:{}", registry.port);
    let data = tempfile::tempdir().expect("tempdir");

    // Anonymous: a token for public pulls.
    let before = tokens.seen().len();
    let public = registry.reference("public/app:v1");
    let out = sandboxd(data.path(), &["images", "pull", &public]);
    assert!(out.status.success(), "{}", text(&out));
    let asked: Vec<_> = tokens.seen()[before..].to_vec();
    assert!(
        asked
            .iter()
            .any(|(user, scope)| user.is_empty() && scope == "repository:public/app:pull"),
        "no anonymous token was asked for: {asked:?}"
    );

    // Private: refused without a login, naming the command.
    let private = registry.reference("team/private:v1");
    let out = sandboxd(data.path(), &["images", "pull", &private]);
    assert!(!out.status.success(), "an anonymous private pull worked");
    assert!(
        text(&out).contains(&format!("sandboxd registry login {host}")),
        "{}",
        text(&out)
    );

    let out = login(data.path(), &host, &format!("{USER}\nwrong-password\n"));
    assert!(out.status.success(), "{}", text(&out));
    let out = sandboxd(data.path(), &["images", "pull", &private]);
    assert!(!out.status.success(), "a wrong password worked");
    assert!(
        text(&out).contains("refused the credentials"),
        "{}",
        text(&out)
    );

    let out = login(data.path(), &host, &format!("{USER}\n{PASSWORD}\n"));
    assert!(out.status.success(), "{}", text(&out));
    let before = tokens.seen().len();
    let out = sandboxd(data.path(), &["images", "pull", &private]);
    assert!(out.status.success(), "{}", text(&out));
    let asked: Vec<_> = tokens.seen()[before..].to_vec();
    assert!(
        asked
            .iter()
            .any(|(user, scope)| user == USER && scope == "repository:team/private:pull"),
        "the credentials were not exchanged for a token: {asked:?}"
    );
    let listed = sandboxd(data.path(), &["images", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.contains(&private), "{listed}");
    assert!(listed.contains(&public), "{listed}");
}
