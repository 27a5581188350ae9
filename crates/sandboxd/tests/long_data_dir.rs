//! A data directory long enough that a sandbox's agent socket path passes `sun_path`'s
//! 107 bytes (`<data>/sandboxes/<id>/agent.sock`: a data dir of ~50 characters): the
//! sandbox still starts, from a warm init too, runs commands and ends, with nothing left.

mod common;
mod gvisor_common;

use sandboxd_runtime::Runtime;

/// A data dir of well over 50 characters under a temporary dir.
fn long_data_dir(root: &std::path::Path) -> std::path::PathBuf {
    let data = root
        .canonicalize()
        .expect("canonical temp dir")
        .join("a-data-directory-whose-name-is-long-enough-for-sun-path");
    std::fs::create_dir(&data).expect("data dir");
    data
}

#[test]
fn a_sandbox_under_a_long_data_dir_starts_runs_commands_and_ends() {
    let root = tempfile::tempdir().expect("temp dir");
    let data = long_data_dir(root.path());
    let rt = common::warm_runtime(&data, 1);
    let cold = rt
        .start(&common::spec("default"))
        .expect("a cold start under a long data dir");
    let warm = common::start_from_warm_init(&rt);
    for handle in [&cold, &warm] {
        assert!(
            handle.agent_socket.as_os_str().len()
                > sandboxd_agent_protocol::socket_path::MAX_SUN_PATH,
            "the test's socket path fits sun_path: {}",
            handle.agent_socket.display()
        );
        assert_eq!(
            common::agent_sh(handle, "echo hello"),
            (Some(0), "hello\n".to_string())
        );
    }
    for handle in [cold, warm] {
        rt.destroy(&handle).expect("destroy");
        common::assert_gone(&rt, &data, &handle);
    }
}

/// The same on the gVisor tier, whose agent socket lies deeper
/// (`<data>/sandboxes/<id>/layer/agent/host/agent.sock`: a data dir of ~33 characters
/// was enough to fail every start). Skipped where runsc is missing.
#[test]
fn a_gvisor_sandbox_under_a_long_data_dir_starts_runs_commands_and_ends() {
    let root = tempfile::tempdir().expect("temp dir");
    let data = long_data_dir(root.path());
    let Some(rt) = gvisor_common::gvisor(&data) else {
        return;
    };
    let handle = rt
        .start(&common::spec("default"))
        .expect("a gVisor start under a long data dir");
    assert!(
        handle.agent_socket.as_os_str().len() > sandboxd_agent_protocol::socket_path::MAX_SUN_PATH
    );
    assert_eq!(
        common::agent_sh(&handle, "echo hello"),
        (Some(0), "hello\n".to_string())
    );
    rt.destroy(&handle).expect("destroy");
    gvisor_common::assert_gone(&rt, &handle);
}
