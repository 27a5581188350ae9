//! Kernel tables every sandbox shares with the host: one sandbox at its limit of
//! pseudo-terminals or open files must leave the host's tables, and other sandboxes,
//! usable.

mod common;
mod serve_bin;

use common::{agent_sh, runtime, spec, wait_for};
use sandboxd_runtime::Runtime;

/// Opens /dev/ptmx until it fails (at most 5000 times), writes `count errno` to
/// /tmp/pty.out and keeps the terminals open until the sandbox ends.
const PTY_HOG: &str = r#"
import os, resource, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held, err = [], 0
while len(held) < 5000:
    try:
        held.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
    except OSError as e:
        err = e.errno
        break
with open("/tmp/pty.out.tmp", "w") as f:
    f.write("%d %d\n" % (len(held), err))
os.rename("/tmp/pty.out.tmp", "/tmp/pty.out")
time.sleep(600)
"#;

#[test]
fn a_sandbox_at_its_pty_limit_leaves_other_sandboxes_their_ptys() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let a = rt.start(&spec("default")).expect("start a");
    let b = rt.start(&spec("default")).expect("start b");
    let result = std::panic::catch_unwind(|| {
        let hog = format!(
            "/usr/bin/python3 -c '{}' </dev/null >/dev/null 2>&1 &",
            PTY_HOG.replace('\'', "'\\''")
        );
        assert_eq!(agent_sh(&a, &hog).0, Some(0));
        wait_for("the PTY hog to reach its limit", || {
            agent_sh(&a, "cat /tmp/pty.out 2>/dev/null").1.contains(' ')
        });
        let (_, out) = agent_sh(&a, "cat /tmp/pty.out");
        let (count, errno) = out.trim().split_once(' ').expect("count errno");
        let count: u32 = count.parse().expect("count");
        assert_eq!(
            (count, errno),
            (sandboxd_runtime::linux::DEFAULT_MAX_PTYS, "28"),
            "the first sandbox opened {count} PTYs (errno {errno}), not its limit then ENOSPC"
        );
        // While the first holds all of its own, the second still gets a terminal.
        let (code, out) = agent_sh(
            &b,
            "/usr/bin/python3 -c 'import os; os.openpty(); print(\"pty ok\")'",
        );
        assert_eq!((code, out.trim()), (Some(0), "pty ok"));
    });
    rt.destroy(&a).expect("destroy a");
    rt.destroy(&b).expect("destroy b");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Prints the soft and hard limits, whether the hard one can be raised, and how many
/// files the process opens before `EMFILE`.
const NOFILE_CHECK: &str = r#"
import os, resource, errno
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
print("soft", soft)
print("hard", hard)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard + 1))
    print("raise hard: allowed")
except (ValueError, OSError) as e:
    print("raise hard: refused")
held, err = [], 0
while len(held) < 100000:
    try:
        held.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        err = e.errno
        break
print("opened", len(held) + 3, "then", errno.errorcode.get(err, err))
"#;

#[test]
fn a_sandbox_process_cannot_hold_more_files_than_its_share_of_the_host_table() {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let file_max: u64 = std::fs::read_to_string("/proc/sys/fs/file-max")
        .expect("file-max")
        .trim()
        .parse()
        .expect("file-max number");
    // The test spec's pids limit, and the engine's default one.
    for pids_max in [128, 1024] {
        let mut s = spec("default");
        s.pids_max = pids_max;
        let (soft, hard) = sandboxd_runtime::linux::open_files_limit(pids_max);
        assert!(soft <= 1024 && soft <= hard, "soft {soft}, hard {hard}");
        assert!(
            hard * u64::from(pids_max) <= file_max / 4 || hard <= 256,
            "{pids_max} processes of {hard} files each could take over a quarter of {file_max}"
        );
        let h = rt.start(&s).expect("start");
        let (code, out) = agent_sh(
            &h,
            &format!(
                "ulimit -Sn; ulimit -Hn; (ulimit -Hn {}) 2>/dev/null && echo raised || echo refused; \
                 exec /usr/bin/python3 -c '{}'",
                hard + 1,
                NOFILE_CHECK.replace('\'', "'\\''")
            ),
        );
        rt.destroy(&h).expect("destroy");
        assert_eq!(code, Some(0), "{out}");
        let expected = format!(
            "{soft}\n{hard}\nrefused\nsoft {soft}\nhard {hard}\nraise hard: refused\nopened {soft} then EMFILE\n"
        );
        assert_eq!(out, expected, "pids_max {pids_max}");
    }
}

#[test]
fn the_server_sets_each_sandboxs_pty_limit_from_its_config() {
    let data = tempfile::tempdir().expect("tempdir");
    let key = "pty-limit-master";
    let env = [
        ("SANDBOXD_NETWORK", "none"),
        ("SANDBOXD_MAX_PTYS_PER_SANDBOX", "5"),
    ];
    let server = serve_bin::Server::start_with_env(data.path(), Some(key), &env);
    let body = serde_json::json!({"name": "ptys", "vcpu": 1, "memoryMb": 128});
    let id = server.create_sandbox(key, &body);
    let script = "import os\nn = 0\ntry:\n    while n < 100:\n        os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY); n += 1\nexcept OSError as e:\n    print(n, e.errno)";
    let out = server.exec(key, &id, &["/usr/bin/python3", "-c", script]);
    server.destroy(key, &id);
    assert_eq!(out, (0, "5 28\n".to_owned()));
}
