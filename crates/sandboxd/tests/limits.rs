//! Resource limits and freezing, observed on real sandboxes: memory, pids, CPU quota, pause.

mod common;

use common::{agent_sh, block, runtime};
use sandboxd_agent_protocol::{AgentClient, ProcessState, SignalRequest, StartProcess};
use sandboxd_runtime::{Runtime, SandboxHandle, SandboxSpec};
use std::time::Duration;
use uuid::Uuid;

fn spec(vcpu: u32, memory_mb: u32, pids_max: u32) -> SandboxSpec {
    SandboxSpec {
        id: Uuid::new_v4(),
        image: "default".into(),
        extra_layers: vec![],
        hostname: "limits".into(),
        vcpu,
        memory_mb,
        pids_max,
        disk_mb: 0,
        isolation: Default::default(),
    }
}

/// Starts `script` under `/bin/sh -c` as a managed process; returns its id.
fn start(handle: &SandboxHandle, script: &str) -> Uuid {
    let id = Uuid::new_v4();
    let client = AgentClient::new(handle.agent_socket.clone());
    let argv = vec!["/bin/sh".into(), "-c".into(), script.into()];
    block(client.start_process(&StartProcess {
        id,
        argv,
        env: None,
        cwd: None,
        hold_output: false,
        user: None,
    }))
    .expect("start");
    id
}

/// Runs `check` against a sandbox made from `spec`, destroying it whatever happens.
fn with_sandbox(spec: SandboxSpec, check: impl FnOnce(&dyn Runtime, &SandboxHandle)) {
    let data = tempfile::tempdir().expect("tempdir");
    let rt = runtime(data.path());
    let handle = rt.start(&spec).expect("start");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&rt, &handle)));
    rt.destroy(&handle).expect("destroy");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// CPU time the sandbox used over `window`, in CPUs.
fn cpus_used(rt: &dyn Runtime, handle: &SandboxHandle, window: Duration) -> f64 {
    let before = rt.usage(handle).expect("usage").cpu_usage_ns;
    let t = std::time::Instant::now();
    std::thread::sleep(window);
    let used = rt.usage(handle).expect("usage").cpu_usage_ns - before;
    used as f64 / t.elapsed().as_nanos() as f64
}

#[test]
fn a_memory_hog_is_killed_and_reported_while_the_sandbox_survives() {
    with_sandbox(spec(1, 64, 256), |_, h| {
        let id = start(
            h,
            "exec /usr/bin/python3 -c 'x = bytearray(256 * 1024 * 1024); print(len(x))'",
        );
        let client = AgentClient::new(h.agent_socket.clone());
        let info = block(client.wait(id, Duration::from_secs(60))).expect("wait");
        assert_eq!(info.state, ProcessState::Killed, "hog not killed: {info:?}");
        assert_eq!(info.signal, Some(9));
        assert_eq!(agent_sh(h, "echo alive"), (Some(0), "alive\n".into()));
    });
}

#[test]
fn a_fork_bomb_stops_at_the_pids_limit() {
    with_sandbox(spec(1, 256, 64), |rt, h| {
        let id = start(h, "bomb() { bomb | bomb & }; bomb; sleep 3");
        std::thread::sleep(Duration::from_secs(2));
        let pids = rt.usage(h).expect("usage").pids;
        assert!(pids <= 64, "pids.current {pids} above the limit");
        let client = AgentClient::new(h.agent_socket.clone());
        block(client.signal(
            id,
            &SignalRequest {
                signal: 9,
                group: true,
            },
        ))
        .expect("kill group");
        // Stragglers may have left the group; the agent still answers once they are gone.
        let mut answered = None;
        for _ in 0..50 {
            answered = Some(agent_sh(h, "echo alive"));
            if answered == Some((Some(0), "alive\n".into())) {
                break;
            }
            agent_sh(h, "kill -9 -1 2>/dev/null");
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(answered, Some((Some(0), "alive\n".into())));
    });
}

#[test]
fn one_vcpu_caps_two_busy_loops_at_about_one_cpu() {
    with_sandbox(spec(1, 128, 64), |rt, h| {
        start(h, "while :; do :; done & while :; do :; done");
        std::thread::sleep(Duration::from_millis(300));
        let used = cpus_used(rt, h, Duration::from_secs(2));
        assert!(
            used < 1.25,
            "two busy loops used {used:.2} CPUs with vcpu=1"
        );
        assert!(used > 0.2, "busy loops barely ran: {used:.2} CPUs");
    });
}

#[test]
fn pause_stops_a_busy_process_and_resume_continues_it() {
    with_sandbox(spec(1, 128, 64), |rt, h| {
        start(h, "while :; do :; done");
        std::thread::sleep(Duration::from_millis(200));
        rt.freeze(h).expect("freeze");
        std::thread::sleep(Duration::from_millis(100));
        let frozen = cpus_used(rt, h, Duration::from_millis(500));
        rt.thaw(h).expect("thaw");
        let thawed = cpus_used(rt, h, Duration::from_millis(500));
        assert!(frozen < 0.01, "frozen sandbox used {frozen:.3} CPUs");
        assert!(thawed > 0.1, "thawed sandbox used only {thawed:.3} CPUs");
        assert_eq!(agent_sh(h, "echo alive"), (Some(0), "alive\n".into()));
    });
}

/// VmRSS of host process `pid`, in KiB, from `/proc/<pid>/status`.
fn vm_rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("agent status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS line")
}

#[test]
fn an_output_flood_leaves_the_agent_small_and_answering() {
    with_sandbox(spec(1, 256, 64), |_, h| {
        let before = vm_rss_kib(h.agent_pid);
        let floods = [
            start(h, "exec yes"),
            start(h, "while :; do head -c 1048576 /dev/urandom; done"),
        ];
        let mut peak = before;
        // A few seconds of flooding, sampled between execs the agent must answer.
        for round in 0..12 {
            std::thread::sleep(Duration::from_millis(250));
            peak = peak.max(vm_rss_kib(h.agent_pid));
            let answer = agent_sh(h, "echo alive");
            assert_eq!(answer, (Some(0), "alive\n".into()), "round {round}");
            peak = peak.max(vm_rss_kib(h.agent_pid));
        }
        let client = AgentClient::new(h.agent_socket.clone());
        for id in floods {
            let info = block(client.get_process(id)).expect("flood still tracked");
            assert_eq!(info.state, ProcessState::Running, "{info:?}");
            let kill = SignalRequest {
                signal: 9,
                group: true,
            };
            block(client.signal(id, &kill)).expect("kill the flood");
            let info = block(client.wait(id, Duration::from_secs(30))).expect("wait");
            assert_eq!(info.state, ProcessState::Killed, "{info:?}");
        }
        eprintln!("agent VmRSS: {before} KiB before, {peak} KiB peak under the flood");
        assert!(
            peak < 64 * 1024,
            "agent VmRSS reached {peak} KiB under an output flood"
        );
        assert_eq!(agent_sh(h, "echo alive"), (Some(0), "alive\n".into()));
    });
}
