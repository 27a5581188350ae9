//! The host's nftables ruleset beside sandboxd's own `inet sandboxd` table: programming
//! sandboxes' networks (in-process) leaves every other table as it was, and the shared
//! table stays while any networked sandbox runs. No traffic is sent.

mod common;

use common::runtime;
use sandboxd_runtime::linux::{LinuxRuntime, NetConfig};
use sandboxd_runtime::{EgressPolicy, NetworkSpec, Runtime};
use std::collections::BTreeMap;
use std::process::Command;

/// The real binary, by path: the test's own listings must not count as the backend's.
const NFT: &str = "/usr/sbin/nft";

/// Runs `nft args`, its stdout (panics if it fails).
fn nft(args: &[&str]) -> String {
    let out = Command::new(NFT).args(args).output().expect("running nft");
    assert!(
        out.status.success(),
        "nft {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every table but sandboxd's, with its stateless listing (no counters), by name.
fn other_tables() -> BTreeMap<String, String> {
    nft(&["list", "tables"])
        .lines()
        .filter_map(|l| l.trim().strip_prefix("table "))
        .filter(|t| *t != "inet sandboxd")
        .map(|t| {
            let mut args = vec!["-s", "list", "table"];
            args.extend(t.split_whitespace());
            (t.to_owned(), nft(&args))
        })
        .collect()
}

/// Tables listed alike in both (those made or removed by others meanwhile are skipped:
/// other tests on this host may come and go).
fn changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    before
        .iter()
        .filter(|(name, text)| after.get(*name).is_some_and(|t| t != *text))
        .map(|(name, _)| name.clone())
        .collect()
}

/// A table of the test's own with a set, a map and a chain (no hook: it filters
/// nothing), removed on drop.
struct ExtraTable(String);

impl ExtraTable {
    fn new() -> Self {
        let name = format!(
            "sbxtest_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let script = format!(
            "table inet {name} {{
  set s {{ type ipv4_addr; flags interval; elements = {{ 192.0.2.0/28, 198.51.100.7 }}; }}
  chain c {{
    ip daddr @s counter drop
  }}
  map m {{ type ifname : verdict; elements = {{ \"sbxdecoy\" : jump c }}; }}
}}
"
        );
        let out = Command::new(NFT)
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(script.as_bytes())?;
                child.wait()
            })
            .expect("nft -f -");
        assert!(out.success(), "making the test's own table");
        ExtraTable(name)
    }
}

impl Drop for ExtraTable {
    fn drop(&mut self) {
        let _ = Command::new(NFT)
            .args(["delete", "table", "inet", &self.0])
            .status();
    }
}

fn table_exists() -> bool {
    Command::new(NFT)
        .args(["list", "table", "inet", "sandboxd"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the shared table holds entries (set elements) of sandbox `id`'s interface.
fn entries_exist(id: uuid::Uuid) -> bool {
    let ifname = format!("\"sbx{}\"", &id.simple().to_string()[..12]);
    Command::new(NFT)
        .args(["list", "table", "inet", "sandboxd"])
        .stderr(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&ifname))
}

#[test]
fn sandboxes_leave_the_rest_of_the_ruleset_alone_and_share_one_table() {
    let extra = ExtraTable::new();
    let before = other_tables();
    assert!(before.contains_key(&format!("inet {}", extra.0)));

    let before_had_table = table_exists();
    let dir = tempfile::tempdir().expect("tempdir");
    let cleanup = runtime(dir.path());
    let mut config = NetConfig::from_host();
    // A documentation address: nothing is sent to it (no traffic in this test).
    config.resolvers = vec!["192.0.2.53".parse().expect("resolver")];
    let rt = LinuxRuntime::with_network(common::raw_runtime(dir.path()), config);
    let policy = EgressPolicy {
        allow: vec!["198.51.100.0/24".parse().expect("allow")],
        deny: vec!["198.51.100.7".parse().expect("deny")],
    };
    let a = rt
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![policy]))
        .expect("start a");
    let b = rt
        .start_with_network(&common::spec("default"), &NetworkSpec::egress(vec![]))
        .expect("start b");
    assert!(table_exists() && entries_exist(a.id) && entries_exist(b.id));
    // Every cloud's metadata service is out of reach (REVIEW13 #8: only the link-local
    // one was), checked in the ruleset: no traffic goes to these outside addresses.
    // A table an older sandboxd made (its sandboxes still running) keeps its set until
    // the host's last sandbox ends: checked when this test's sandboxes made it.
    let blocked = nft(&["list", "set", "inet", "sandboxd", "blocked"]);
    let made_here = !before_had_table;
    for metadata in ["169.254.0.0/16", "100.100.100.200", "168.63.129.16"] {
        assert!(
            !made_here || blocked.contains(metadata),
            "{metadata} not in {blocked}"
        );
    }
    let during = other_tables();

    rt.destroy(&a).expect("destroy a");
    assert!(
        table_exists(),
        "the shared table went away while a sandbox still runs"
    );
    assert!(entries_exist(b.id), "destroying a touched b's entries");
    assert!(!entries_exist(a.id), "a's entries stayed");
    rt.destroy(&b).expect("destroy b");
    assert!(!entries_exist(b.id), "b's entries stayed");
    let after = other_tables();
    drop(cleanup);

    assert_eq!(changed(&before, &during), Vec::<String>::new());
    assert_eq!(changed(&before, &after), Vec::<String>::new());
    let ours = format!("inet {}", extra.0);
    assert_eq!(before.get(&ours), after.get(&ours), "the test's own table");
}

/// Programming a sandbox's network spawns no `nft` or `ip` process, and needs no
/// GPL library loaded (libnftables stays off): tools of those names first on PATH
/// record any call (and then do the real thing). The first sandbox makes the shared
/// table (over netlink too) and keeps it while the others start and end; its own
/// destroy deletes the table.
#[test]
fn start_and_destroy_spawn_no_nft_or_ip() {
    let bin = tempfile::tempdir().expect("tempdir");
    let log = bin.path().join("calls");
    for tool in ["nft", "ip"] {
        let path = bin.path().join(tool);
        let script = format!(
            "#!/bin/sh\necho {tool} \"$@\" >> {}\nexec /usr/sbin/{tool} \"$@\"\n",
            log.display()
        );
        std::fs::write(&path, script).expect("fake tool");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // nextest runs each test in a process of its own: this PATH is this test's alone.
    std::env::set_var("PATH", path);
    std::env::remove_var("SANDBOXD_LIBNFTABLES");
    // A network namespace and network state of the test's own: the table is made here
    // (by the keeper) whatever other tests on the host do.
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
    let state = tempfile::tempdir().expect("tempdir");

    let dir = tempfile::tempdir().expect("tempdir");
    let cleanup = runtime(dir.path());
    let mut config = NetConfig::from_host();
    config.state_dir = state.path().to_path_buf();
    config.resolvers = vec!["192.0.2.53".parse().expect("resolver")];
    let rt = LinuxRuntime::with_network(common::raw_runtime(dir.path()), config);
    let start = |network: &NetworkSpec| {
        rt.start_with_network(&common::spec("default"), network)
            .expect("start")
    };
    let keeper = start(&NetworkSpec::egress(vec![]));
    assert!(table_exists() && entries_exist(keeper.id));

    let policy = EgressPolicy {
        allow: vec!["198.51.100.0/24".parse().expect("allow")],
        deny: vec!["198.51.100.7".parse().expect("deny")],
    };
    let a = start(&NetworkSpec::egress(vec![policy]));
    let b = start(&NetworkSpec::egress(vec![]));
    assert!(entries_exist(a.id) && entries_exist(b.id));
    rt.destroy(&a).expect("destroy a");
    rt.destroy(&b).expect("destroy b");
    assert!(!entries_exist(a.id) && !entries_exist(b.id));
    rt.destroy(&keeper).expect("destroy the keeper");
    assert!(!table_exists(), "the table outlived the last sandbox");
    drop(cleanup);
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        calls, "",
        "processes spawned on the start and destroy paths"
    );
}
