//! The committed OpenAPI documents are exactly what `sandboxd openapi` prints, so they
//! never drift from the code (regenerate: `sandboxd openapi --dialect D > docs/openapi/D.json`).

use std::process::Command;

fn printed(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .arg("openapi")
        .args(args)
        .output()
        .expect("run sandboxd openapi");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn every_committed_document_is_what_sandboxd_openapi_prints() {
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi");
    for dialect in ["inngest", "openrelay", "runzivo"] {
        let committed = std::fs::read_to_string(format!("{docs}/{dialect}.json")).unwrap();
        assert!(
            committed == printed(&["--dialect", dialect]),
            "docs/openapi/{dialect}.json is stale: run \
             `sandboxd openapi --dialect {dialect} > docs/openapi/{dialect}.json`"
        );
    }
    // The default stays the Inngest document.
    let inngest = std::fs::read_to_string(format!("{docs}/inngest.json")).unwrap();
    assert!(
        inngest == printed(&[]),
        "`sandboxd openapi` no longer prints inngest.json"
    );
}
