//! Disk sizes through the engine API: chosen at create (request, else snapshot or
//! template, else the server's default), kept on the sandbox and its snapshots, and
//! refused past the server's maximum before anything starts.

mod common;

use common::*;
use sandboxd_engine::*;
use std::time::Duration;

fn disk_limits() -> Limits {
    Limits {
        disk_mb_per_sandbox: 1024,
        max_disk_mb_per_sandbox: 2048,
        ..limits()
    }
}

fn with_disk(name: Option<&str>, disk_mb: Option<u32>) -> CreateSandbox {
    CreateSandbox {
        disk_mb,
        ..request(name)
    }
}

impl Harness {
    /// The disk size the runtime was asked to give sandbox `id`.
    fn started_disk(&self, id: uuid::Uuid) -> u32 {
        self.runtime.state().specs[&id].disk_mb
    }
}

#[tokio::test]
async fn the_request_wins_then_the_snapshot_then_the_default() {
    let h = Harness::with_limits(disk_limits());
    let ws = h.ws();
    let (plain, _) = h.engine.create(&ws, request(None)).await.unwrap();
    assert_eq!(
        (plain.disk_mb, h.started_disk(plain.id)),
        (Some(1024), 1024)
    );

    let (small, _) = h
        .engine
        .create(&ws, with_disk(None, Some(64)))
        .await
        .unwrap();
    assert_eq!((small.disk_mb, h.started_disk(small.id)), (Some(64), 64));
    assert_eq!(h.engine.get(&ws, small.id).await.unwrap().disk_mb, Some(64));

    let snap = h.engine.snapshot(&ws, small.id, None).await.unwrap();
    assert_eq!(snap.disk_mb, Some(64));
    assert_eq!(
        h.engine.get_snapshot(&ws, snap.id).await.unwrap().disk_mb,
        Some(64)
    );
    let clone = CreateSandbox {
        snapshot_id: Some(snap.id),
        ..request(None)
    };
    let (child, _) = h.engine.create(&ws, clone.clone()).await.unwrap();
    assert_eq!((child.disk_mb, h.started_disk(child.id)), (Some(64), 64));
    let bigger = CreateSandbox {
        disk_mb: Some(2048),
        ..clone
    };
    let (child, _) = h.engine.create(&ws, bigger).await.unwrap();
    assert_eq!(
        h.started_disk(child.id),
        2048,
        "the request wins over the snapshot"
    );

    let reopened = h.reopen();
    assert_eq!(reopened.get(&ws, small.id).await.unwrap().disk_mb, Some(64));
}

#[tokio::test]
async fn past_the_maximum_is_refused_before_anything_starts() {
    let h = Harness::with_limits(disk_limits());
    let ws = h.ws();
    for (asked, says) in [
        (2049, "(2049 MiB) exceeds the server's maximum of 2048 MiB"),
        (0, "no size limit"),
        (disk::MIN_DISK_MB - 1, "below the minimum"),
    ] {
        let e = h
            .engine
            .create(&ws, with_disk(Some("big"), Some(asked)))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{asked}: {e}");
        assert!(e.message.contains(says), "{asked}: {e}");
    }
    assert!(h.runtime.state().specs.is_empty(), "nothing started");
    let listed = h
        .engine
        .list(&ws, sandboxd_engine::PageRequest::default())
        .await
        .unwrap();
    let found = listed
        .items
        .iter()
        .find(|sb| sb.name.as_deref() == Some("big"));
    assert_eq!(found, None, "nothing recorded");

    let unlimited = Limits {
        max_disk_mb_per_sandbox: 0,
        ..disk_limits()
    };
    let h = Harness::with_limits(unlimited);
    let (sb, _) = h
        .engine
        .create(&ws, with_disk(None, Some(0)))
        .await
        .unwrap();
    assert_eq!(
        (sb.disk_mb, h.started_disk(sb.id)),
        (Some(0), 0),
        "no limit"
    );
}

#[tokio::test]
async fn a_repeated_named_create_must_ask_for_the_same_disk() {
    let h = Harness::with_limits(disk_limits());
    let ws = h.ws();
    let (first, _) = h
        .engine
        .create(&ws, with_disk(Some("d"), Some(64)))
        .await
        .unwrap();
    let (again, created) = h
        .engine
        .create(&ws, with_disk(Some("d"), Some(64)))
        .await
        .unwrap();
    assert_eq!((again.id, created), (first.id, false));
    let e = h
        .engine
        .create(&ws, with_disk(Some("d"), Some(128)))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NameTaken);
    let e = h.engine.create(&ws, request(Some("d"))).await.unwrap_err();
    assert_eq!(
        e.code,
        ErrorCode::NameTaken,
        "the default (1024) is another disk"
    );
}

fn build(name: &str, from: &str, disk_mb: Option<u32>) -> TemplateBuild {
    TemplateBuild {
        name: name.into(),
        from: from.into(),
        steps: Vec::new(),
        resources: None,
        disk_mb,
        step_timeout: Duration::from_secs(10),
        isolation: None,
    }
}

#[tokio::test]
async fn templates_keep_their_disk_and_give_it_to_their_sandboxes() {
    let h = Harness::with_limits(disk_limits());
    let ws = h.ws();
    let all = h.engine.list_templates(&ws).await.unwrap();
    assert!(
        all.iter().all(|t| t.disk_mb == 1024),
        "built-ins: the default"
    );

    let small = h
        .engine
        .build_template(&ws, build("small", "default", Some(64)))
        .await
        .unwrap();
    assert_eq!((small.builtin, small.disk_mb), (false, 64));
    let got = h.engine.get_template(&ws, "small").await.unwrap();
    assert_eq!(got.disk_mb, 64);
    let (sb, _) = h
        .engine
        .create(&ws, got.create_request(got.resources))
        .await
        .unwrap();
    assert_eq!((sb.disk_mb, h.started_disk(sb.id)), (Some(64), 64));

    // A template built on it without a size keeps its base's; one with a size, its own.
    let derived = h
        .engine
        .build_template(&ws, build("derived", "small", None))
        .await
        .unwrap();
    assert_eq!(derived.disk_mb, 64);
    let roomy = h
        .engine
        .build_template(&ws, build("roomy", "small", Some(512)))
        .await
        .unwrap();
    assert_eq!(roomy.disk_mb, 512);

    let e = h
        .engine
        .build_template(&ws, build("huge", "default", Some(4096)))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
    assert!(e.message.contains("maximum of 2048"), "{e}");
    let e = h.engine.get_template(&ws, "huge").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::ImageNotFound);
}
