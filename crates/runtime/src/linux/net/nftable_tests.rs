//! The table made in-process against the one `nft -f` makes of the script, listed by
//! `nft` itself; each test in network namespaces of its own (needs root and `nft`).

use super::*;
use crate::linux::net::nft::{apply, base_table};
use std::process::Command;

/// A fresh network namespace for this thread (the test's own; the last one goes when
/// the thread ends).
fn fresh_netns() {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare the netns");
}

fn nft(args: &[&str]) -> String {
    let out = Command::new("nft").args(args).output().expect("nft");
    assert!(
        out.status.success(),
        "nft {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The table as `nft` lists it, and its rules' bytecode, with each rule's handle (and
/// the one before it) cut from its header line: the one thing that may differ.
fn listing() -> (String, String) {
    let text = nft(&["list", "table", "inet", TABLE]);
    let code = nft(&["--debug=netlink", "list", "table", "inet", TABLE]);
    let code = code
        .lines()
        .map(|line| match line.strip_prefix("inet sandboxd ") {
            Some(rest) if !rest.starts_with('@') => {
                let chain = rest.split_whitespace().next().unwrap_or_default();
                format!("rule of {chain}")
            }
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    (text, code)
}

#[test]
fn the_batch_makes_the_table_the_script_makes() {
    for guard in [false, true] {
        fresh_netns();
        apply(&base_table(guard)).expect("the script");
        let (want_text, want_code) = listing();
        fresh_netns();
        make(guard).expect("the batch");
        let (text, code) = listing();
        assert_eq!(text, want_text, "guard {guard}");
        assert_eq!(code, want_code, "guard {guard}");
        assert!(
            text.contains("224.0.0.0/3") && text.contains("auto-merge"),
            "{text}"
        );
        assert!(
            code.contains("[ masq ]") && code.contains("ct load state"),
            "{code}"
        );
        assert_eq!(
            text.contains("\t\tdrop\n\t}"),
            guard,
            "the guard's rule: {text}"
        );
    }
}

/// Made again over a table a crash left (with stray entries and rules), it is as new;
/// tables of other names or families, and their rules, stay as they were.
#[test]
fn making_it_again_replaces_that_table_and_nothing_else() {
    fresh_netns();
    make(false).expect("the batch");
    let (fresh_text, fresh_code) = listing();
    let others = "table inet other {
  chain c { type filter hook input priority 0; policy accept; tcp dport 22 accept; }
}
table ip sandboxd {
  chain c { type filter hook output priority 0; policy accept; udp dport 53 drop; }
}
";
    apply(others).expect("other tables");
    let other_tables = || {
        (
            nft(&["list", "table", "inet", "other"]),
            nft(&["list", "table", "ip", TABLE]),
        )
    };
    let before = other_tables();
    apply(&format!(
        "add element inet {TABLE} nets {{ 10.213.0.0/30 }}
add rule inet {TABLE} egress drop
add chain inet {TABLE} stray
"
    ))
    .expect("strays");
    assert_ne!(listing().0, fresh_text);
    make(false).expect("made again");
    assert_eq!(listing(), (fresh_text, fresh_code));
    assert_eq!(other_tables(), before, "the rest of the ruleset");
    assert!(before.0.contains("tcp dport 22 accept") && before.1.contains("udp dport 53 drop"));
}

/// The table's batch with a rule into a chain it does not make, before its end: one
/// the kernel refuses (`ENOENT`).
fn refused_batch(guard: bool) -> Vec<(NetlinkMessage<NetfilterMessage>, u16)> {
    let mut msgs = batch(guard);
    let at = msgs.len() - 1;
    msgs.insert(
        at,
        (
            super::super::nfset::inet(NfTablesMessage::NewRule(rule("missing", vec![x::drop()]))),
            NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK,
        ),
    );
    msgs
}

/// The kernel refuses a batch it cannot take whole: then nothing of it is there, and a
/// table that was there stays.
#[test]
fn a_refused_batch_leaves_what_was_there() {
    fresh_netns();
    make(false).expect("the batch");
    let was = listing();
    let e = nlsock::transact(NETLINK_NETFILTER, refused_batch(true)).expect_err("refused");
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    assert_eq!(listing(), was);
}

/// The socket kept after an exchange serves the next one, only in the network
/// namespace it was opened in; one whose batch was refused is not kept, and a refusal
/// answered after the last ack asked for is still the exchange's error: a thread that
/// moves to another namespace makes its table there, and each answer is its own
/// exchange's.
#[test]
fn exchanges_after_a_refusal_and_a_move_answer_for_themselves() {
    use std::sync::atomic::Ordering;
    fresh_netns();
    make(false).expect("the batch");
    let reused = nlsock::REUSED.load(Ordering::Relaxed);
    make(false).expect("again");
    assert!(
        nlsock::REUSED.load(Ordering::Relaxed) > reused,
        "the kept socket served the next exchange"
    );
    let refused = refused_batch(false);
    for _ in 0..3 {
        let e = nlsock::transact(NETLINK_NETFILTER, refused.clone()).expect_err("refused");
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        make(false).expect("made after a refusal");
    }
    // The refused message is not asked to ack, the one before it is: its error comes
    // after the last ack the exchange waits for, and is still its answer (not left
    // queued for the next exchange on the kept socket).
    let mut unasked = refused.clone();
    let at = unasked.len() - 2;
    unasked[at].1 &= !NLM_F_ACK;
    let e = nlsock::transact(NETLINK_NETFILTER, unasked).expect_err("refused after the ack");
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    make(false).expect("made after that refusal");
    let first = listing();
    fresh_netns();
    assert!(
        !crate::linux::net::table_exists(),
        "a new namespace has no table"
    );
    make(true).expect("made in the new namespace");
    assert!(crate::linux::net::table_exists());
    assert!(
        listing().0.contains("\t\tdrop\n\t}"),
        "the guarded table, here"
    );
    assert_ne!(listing(), first);
}

/// The thread that closes failed sockets aside, started by a thread in a namespace of
/// its own, does not keep that namespace alive: it lives in the main thread's.
#[test]
fn the_closer_thread_keeps_no_namespace_of_its_starter() {
    use std::os::unix::fs::MetadataExt;
    let ino = |path: &str| std::fs::metadata(path).map(|m| m.ino()).ok();
    let main = ino("/proc/self/ns/net").expect("the main thread's namespace");
    fresh_netns();
    assert_ne!(
        ino("/proc/thread-self/ns/net"),
        Some(main),
        "a namespace of its own"
    );
    let e = nlsock::transact(NETLINK_NETFILTER, refused_batch(false)).expect_err("refused");
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    let closer = || {
        std::fs::read_dir("/proc/thread-self/..")
            .expect("this process's threads")
            .flatten()
            .find(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "netlink-closer")
            })
            .and_then(|t| ino(&t.path().join("ns/net").to_string_lossy()))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while closer() != Some(main) {
        assert!(
            std::time::Instant::now() < deadline,
            "the closer thread's namespace: {:?}, the main thread's: {main}",
            closer()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
