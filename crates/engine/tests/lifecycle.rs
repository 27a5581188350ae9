//! The lifecycle state machine through the engine API, over a test double runtime.

mod common;

use common::*;
use sandboxd_engine::*;
use std::time::Duration;
use uuid::Uuid;

#[tokio::test]
async fn create_runs_and_destroy_is_idempotent() {
    let h = Harness::new();
    let (sb, created) = h
        .engine
        .create(&h.ws(), request(Some("web")))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(sb.status, SandboxStatus::Running);
    assert!(sb.started_at.is_some());
    let spec = h.runtime.state().specs[&sb.id].clone();
    assert_eq!(
        (spec.image.as_str(), spec.hostname.as_str(), spec.pids_max),
        ("default", "web", 512)
    );

    let ended = h.engine.destroy(&h.ws(), sb.id).await.unwrap();
    assert_eq!(ended.status, SandboxStatus::Terminated);
    assert_eq!(ended.end_reason, Some(EndReason::Destroyed));
    let again = h.engine.destroy(&h.ws(), sb.id).await.unwrap();
    assert_eq!(
        again, ended,
        "destroying a terminal sandbox changes nothing"
    );
    assert_eq!(
        h.runtime.state().destroyed,
        vec![sb.id],
        "torn down exactly once"
    );
    assert_eq!(h.engine.get(&h.ws(), sb.id).await.unwrap(), ended);
}

#[tokio::test]
async fn names_are_reused_only_with_the_same_configuration() {
    // A server whose default is egress (one with `none` refuses egress creates first).
    let h = Harness::with_limits(Limits {
        default_network: NetworkMode::Egress,
        ..Limits::default()
    });
    let (first, _) = h
        .engine
        .create(&h.ws(), request(Some("job")))
        .await
        .unwrap();
    let (same, created) = h
        .engine
        .create(&h.ws(), request(Some("job")))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(same.id, first.id);

    let mut bigger = request(Some("job"));
    bigger.resources.memory_mb = 512;
    let err = h.engine.create(&h.ws(), bigger).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NameTaken);
    let mut other_env = request(Some("job"));
    other_env.environment.insert("X".into(), "1".into());
    assert_eq!(
        h.engine.create(&h.ws(), other_env).await.unwrap_err().code,
        ErrorCode::NameTaken
    );
    // Another autoPause consent, another network mode or egress layer: not a repeat.
    let spoils: [Spoil; 3] = [
        |r| r.auto_pause = true,
        |r| r.network = Some(NetworkMode::None),
        |r| {
            r.network = Some(NetworkMode::Egress);
            r.egress = Some(sandboxd_runtime::EgressPolicy {
                allow: vec!["198.18.0.1".parse().expect("rule")],
                deny: Vec::new(),
            });
        },
    ];
    for spoil in spoils {
        let mut other = request(Some("job"));
        spoil(&mut other);
        let err = h.engine.create(&h.ws(), other).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::NameTaken, "{err}");
    }
    // With the mode kept egress, another egress layer alone is not a repeat either.
    let policy = |rule: &str| sandboxd_runtime::EgressPolicy {
        allow: vec![rule.parse().expect("rule")],
        deny: Vec::new(),
    };
    let mut walled = request(Some("walled"));
    walled.network = Some(NetworkMode::Egress);
    walled.egress = Some(policy("198.18.0.1"));
    let (walled_sb, created) = h.engine.create(&h.ws(), walled.clone()).await.unwrap();
    assert!(created);
    let (same, created) = h.engine.create(&h.ws(), walled.clone()).await.unwrap();
    assert!(!created && same.id == walled_sb.id);
    let mut other_policy = walled;
    other_policy.egress = Some(policy("198.18.0.2"));
    let err = h.engine.create(&h.ws(), other_policy).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NameTaken, "{err}");
    h.engine.destroy(&h.ws(), walled_sb.id).await.unwrap();
    // The server's default network asked for by name is the same network.
    let mut explicit = request(Some("job"));
    explicit.network = Some(h.engine.limits().default_network);
    let (same, created) = h.engine.create(&h.ws(), explicit).await.unwrap();
    assert!(!created && same.id == first.id);

    // Another workspace has its own names; a destroyed sandbox frees its name.
    let (elsewhere, created) = h
        .engine
        .create(&"w2".into(), request(Some("job")))
        .await
        .unwrap();
    assert!(created && elsewhere.id != first.id);
    h.engine.destroy(&h.ws(), first.id).await.unwrap();
    let (fresh, created) = h
        .engine
        .create(&h.ws(), request(Some("job")))
        .await
        .unwrap();
    assert!(created && fresh.id != first.id);
}

/// A fork (a create from a memory snapshot) gets the server's default network, and a
/// repeated named fork compares with that: on a server whose default is egress, the
/// same fork again is the same sandbox.
#[tokio::test]
async fn a_named_fork_is_reused_on_a_server_whose_default_network_is_egress() {
    let h = Harness::with_limits(Limits {
        default_network: NetworkMode::Egress,
        ..limits()
    });
    h.runtime.state().memory = true;
    let (source, _) = h.engine.create(&h.ws(), request(None)).await.unwrap();
    let snap = h.engine.snapshot(&h.ws(), source.id, None).await.unwrap();
    assert!(snap.memory_image.is_some(), "{snap:?}");
    let mut fork = request(Some("fork"));
    fork.snapshot_id = Some(snap.id);
    let (first, created) = h.engine.create(&h.ws(), fork.clone()).await.unwrap();
    assert!(created);
    assert_eq!(h.runtime.state().networks[&first.id], NetworkMode::Egress);
    let (again, created) = h.engine.create(&h.ws(), fork.clone()).await.unwrap();
    assert!(!created && again.id == first.id);
    fork.network = Some(NetworkMode::None);
    let err = h.engine.create(&h.ws(), fork).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NameTaken, "{err}");
}

#[tokio::test]
async fn a_server_without_network_refuses_a_create_asking_for_egress() {
    let h = Harness::with_limits(Limits {
        default_network: NetworkMode::None,
        ..limits()
    });
    let mut egress = request(None);
    egress.network = Some(NetworkMode::Egress);
    let err = h.engine.create(&h.ws(), egress).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
    assert!(h.runtime.state().networks.is_empty(), "nothing was started");
    let (plain, _) = h.engine.create(&h.ws(), request(None)).await.unwrap();
    assert_eq!(h.runtime.state().networks[&plain.id], NetworkMode::None);
}

/// A change that makes a create request invalid.
type Spoil = fn(&mut CreateSandbox);

#[tokio::test]
async fn create_validates_before_anything_starts() {
    let h = Harness::new();
    let cases: [(Spoil, ErrorCode); 6] = [
        (
            |r| r.name = Some("Bad Name".into()),
            ErrorCode::InvalidArgument,
        ),
        (|r| r.resources.vcpu = 0, ErrorCode::InvalidArgument),
        (|r| r.resources.memory_mb = 0, ErrorCode::InvalidArgument),
        (|r| r.image = Some("nope".into()), ErrorCode::ImageNotFound),
        (
            |r| r.secrets = vec!["MISSING".into()],
            ErrorCode::SecretNotFound,
        ),
        (
            |r| r.snapshot_id = Some(Uuid::new_v4()),
            ErrorCode::SnapshotNotFound,
        ),
    ];
    for (edit, code) in cases {
        let mut req = request(None);
        edit(&mut req);
        assert_eq!(h.engine.create(&h.ws(), req).await.unwrap_err().code, code);
    }
    assert!(h.runtime.state().specs.is_empty());
    assert!(h
        .engine
        .list(&h.ws(), PageRequest::default())
        .await
        .unwrap()
        .items
        .is_empty());
}

#[tokio::test]
async fn a_failed_start_is_recorded_and_leaves_nothing() {
    let h = Harness::new();
    h.runtime.state().fail_start = true;
    let err = h
        .engine
        .create(&h.ws(), request(Some("x")))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    let listed = h
        .engine
        .list(&h.ws(), PageRequest::default())
        .await
        .unwrap()
        .items;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, SandboxStatus::Failed);
    assert_eq!(listed[0].end_reason, Some(EndReason::StartFailed));
    assert!(listed[0].error.as_deref().unwrap().contains("agent exited"));
    assert!(h.runtime.state().alive.is_empty());
    // The name is free again.
    h.runtime.state().fail_start = false;
    assert!(
        h.engine
            .create(&h.ws(), request(Some("x")))
            .await
            .unwrap()
            .1
    );
}

#[tokio::test]
async fn capacity_limits_refuse_new_sandboxes() {
    let h = Harness::with_limits(Limits {
        max_sandboxes: 2,
        max_vcpu_total: 3,
        max_memory_mb_total: 1024,
        pids_per_sandbox: 64,
        disk_policy: common::generous_disk(),
        ..Limits::default()
    });
    let (a, _) = h.engine.create(&h.ws(), request(None)).await.unwrap();
    let mut two_cpus = request(None);
    two_cpus.resources.vcpu = 3;
    assert_eq!(
        h.engine.create(&h.ws(), two_cpus).await.unwrap_err().code,
        ErrorCode::CapacityExhausted
    );
    h.engine.create(&h.ws(), request(None)).await.unwrap();
    assert_eq!(
        h.engine
            .create(&h.ws(), request(None))
            .await
            .unwrap_err()
            .code,
        ErrorCode::CapacityExhausted
    );
    h.engine.destroy(&h.ws(), a.id).await.unwrap();
    h.engine.create(&h.ws(), request(None)).await.unwrap();
}

#[tokio::test]
async fn pause_and_resume_guard_runtime_operations() {
    let h = Harness::new();
    let ws = h.ws();
    let (sb, _) = h.engine.create(&ws, request(None)).await.unwrap();
    assert_eq!(
        h.engine.resume(&ws, sb.id).await.unwrap().status,
        SandboxStatus::Running
    );
    let paused = h.engine.pause(&ws, sb.id).await.unwrap();
    assert_eq!(paused.status, SandboxStatus::Paused);
    assert!(h.runtime.state().frozen.contains(&sb.id));
    assert_eq!(
        h.engine.pause(&ws, sb.id).await.unwrap(),
        paused,
        "pausing twice is a no-op"
    );

    let err = h
        .engine
        .exec(&ws, sb.id, exec(&["/bin/true"]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::WrongState);
    let err = h
        .engine
        .signal_process(&ws, sb.id, Uuid::new_v4(), 15, false)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::WrongState);

    assert_eq!(
        h.engine.resume(&ws, sb.id).await.unwrap().status,
        SandboxStatus::Running
    );
    assert!(!h.runtime.state().frozen.contains(&sb.id));
    h.engine.destroy(&ws, sb.id).await.unwrap();
    assert_eq!(
        h.engine.pause(&ws, sb.id).await.unwrap_err().code,
        ErrorCode::WrongState
    );
}

#[tokio::test]
async fn arguments_are_checked_before_the_agent_is_asked() {
    let h = Harness::new();
    let ws = h.ws();
    let (sb, _) = h.engine.create(&ws, request(None)).await.unwrap();
    for argv in [&["echo", "hi"][..], &[][..], &["/bin/echo", "a\0b"][..]] {
        let err = h.engine.exec(&ws, sb.id, exec(argv)).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument, "{argv:?}");
    }
    let pid = Uuid::new_v4();
    for sig in [0, 65, -1] {
        let err = h
            .engine
            .signal_process(&ws, sb.id, pid, sig, true)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument);
    }
    assert_eq!(
        h.engine
            .read_file(&ws, sb.id, "etc/passwd")
            .await
            .err()
            .unwrap()
            .code,
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        h.engine.get(&ws, sb.id).await.unwrap().status,
        SandboxStatus::Running
    );
}

#[tokio::test]
async fn an_unreachable_agent_ends_the_sandbox_only_when_it_is_dead() {
    let h = Harness::new();
    let ws = h.ws();
    let (live, _) = h.engine.create(&ws, request(None)).await.unwrap();
    let err = h
        .engine
        .exec(&ws, live.id, exec(&["/bin/true"]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert_eq!(
        h.engine.get(&ws, live.id).await.unwrap().status,
        SandboxStatus::Running
    );

    h.runtime.kill(live.id);
    let err = h
        .engine
        .wait_process(&ws, live.id, Uuid::new_v4(), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    let ended = h.engine.get(&ws, live.id).await.unwrap();
    assert_eq!(
        (ended.status, ended.end_reason),
        (SandboxStatus::Terminated, Some(EndReason::Crashed))
    );
}

#[tokio::test]
async fn expired_sandboxes_are_terminated_with_reason_timeout() {
    let h = Harness::new();
    let ws = h.ws();
    let mut req = request(Some("short"));
    req.timeout = Some(Duration::ZERO);
    let (sb, _) = h.engine.create(&ws, req).await.unwrap();
    let seen = h.engine.get(&ws, sb.id).await.unwrap();
    assert_eq!(
        (seen.status, seen.end_reason),
        (SandboxStatus::Terminated, Some(EndReason::Timeout))
    );
    assert!(h.runtime.state().destroyed.contains(&sb.id));

    let mut req = request(None);
    req.timeout = Some(Duration::ZERO);
    let (other, _) = h.engine.create(&ws, req).await.unwrap();
    let (kept, _) = h.engine.create(&ws, request(None)).await.unwrap();
    h.engine.expire_due().await;
    assert_eq!(
        h.engine.get(&ws, other.id).await.unwrap().end_reason,
        Some(EndReason::Timeout)
    );
    assert_eq!(
        h.engine.get(&ws, kept.id).await.unwrap().status,
        SandboxStatus::Running
    );
}
