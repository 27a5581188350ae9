//! A create's audit entry is written with its RUNNING record, in one transaction: a
//! create answered as a success always has its `ok` entry on record by then, and a
//! create whose write failed is on record with its error, never as `ok`.

mod faults;

use faults::{request, Fixture};
use sandboxd_engine::{Deadlines, SandboxStatus};
use time::OffsetDateTime;

/// The workspace's `sandbox.create` entries as (target, outcome).
fn create_entries(f: &Fixture, since: OffsetDateTime) -> Vec<(Option<String>, String)> {
    f.engine
        .audit_entries(&f.ws(), since)
        .expect("audit entries")
        .into_iter()
        .filter(|e| e.action == "sandbox.create")
        .map(|e| (e.target, e.outcome))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_is_answered_as_started_only_with_its_audit_entry_on_record() {
    let scenario = fail::FailScenario::setup();
    let f = Fixture::new(Deadlines::default(), false);
    let since = OffsetDateTime::now_utc() - time::Duration::seconds(1);

    // Its entry is on record as soon as the create returns (no later write to wait for).
    let (sb, created) = f
        .engine
        .create(&f.ws(), request("a"))
        .await
        .expect("create");
    assert!(created);
    assert_eq!(
        create_entries(&f, since),
        [(Some(sb.id.to_string()), "ok".to_owned())]
    );
    f.engine.destroy(&f.ws(), sb.id).await.expect("destroy");

    // The entry cannot be written with the RUNNING record: the create fails and rolls
    // back, and its entry (written once more, the fault gone) says so. Before, the
    // create was answered as a success with no entry at all.
    let since = OffsetDateTime::now_utc();
    fail::cfg("store.insert_audit", "1*return").expect("failpoint");
    let answered = f.engine.create(&f.ws(), request("b")).await;
    fail::remove("store.insert_audit");
    let entries = create_entries(&f, since);
    match answered {
        Ok((sb, _)) => {
            f.engine.destroy(&f.ws(), sb.id).await.expect("destroy");
            panic!(
                "create {} answered as {} with entries {entries:?}",
                sb.id,
                sb.status.as_str()
            )
        }
        Err(e) => assert_eq!(entries.len(), 1, "{e}: {entries:?}"),
    }
    assert_ne!(entries[0].1, "ok", "{entries:?}");
    f.assert_only(&[], "a create whose audit entry was not written")
        .await;
    let failed = f.records().await;
    assert!(
        failed
            .iter()
            .any(|r| r.name.as_deref() == Some("b") && r.status == SandboxStatus::Failed),
        "{failed:?}"
    );

    // The RUNNING record cannot be written: no `ok` entry either.
    let since = OffsetDateTime::now_utc();
    fail::cfg("store.save.RUNNING", "1*return").expect("failpoint");
    let answered = f.engine.create(&f.ws(), request("c")).await;
    fail::remove("store.save.RUNNING");
    answered.expect_err("RUNNING not written");
    let entries = create_entries(&f, since);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_ne!(entries[0].1, "ok", "{entries:?}");
    f.assert_only(&[], "a create whose RUNNING record was not written")
        .await;

    f.finish().await;
    scenario.teardown();
}
