//! OpenRelay create bodies: strict JSON into `CreateBody`, then its plan against a template.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sandboxd_dialect_common::json::parse_strict;
use sandboxd_dialect_openrelay::body::{CreateBody, RunSpec};
use sandboxd_dialect_openrelay::{events::resume_after, meta::check_user};
use sandboxd_engine::{Resources, Template};
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    let template = Template {
        name: "t".into(),
        description: String::new(),
        builtin: true,
        resources: Resources { vcpu: 2, memory_mb: 1024 },
        snapshot_id: None,
        image: None,
        created_at: None,
        network: None,
        disk_mb: 10 * 1024,
        isolation: None,
        memory: false,
    };
    if let Ok(body) = parse_strict::<CreateBody>(data) {
        let _ = body.plan(&template);
    }
    if let Ok(run) = parse_strict::<RunSpec>(data) {
        let _ = run.argv();
    }
    if let Ok(meta) = parse_strict::<BTreeMap<String, String>>(data) {
        let _ = check_user(&meta);
    }
    let after = data.first().copied().unwrap_or(0) as u64;
    let _ = resume_after(data, after);
});
