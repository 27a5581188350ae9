//! OpenRelay run output that ends part-way through a UTF-8 character: the cut bytes
//! become U+FFFD, as the README promises for invalid bytes, never dropped. Both streams,
//! JSON and NDJSON, in a create's `run` and in an exec.

mod openrelay;
mod serve_bin;

use openrelay::{check_framing, lines, output, Or};
use serde_json::json;

/// `ab` then the first two bytes of `€` on stdout; `x` and the first byte of `é` on
/// stderr.
const CUT: &str = r"printf 'ab\342\202'; printf 'x\303' >&2";

#[test]
fn output_ending_inside_a_character_ends_with_a_replacement() {
    let data = tempfile::tempdir().expect("temp dir");
    let or = Or::start(data.path(), &[]);
    let made = or.create(&json!({"template": "default", "run": {"cmd": CUT}}));
    let id = made["id"].as_str().expect("id").to_owned();
    let want = ("ab\u{fffd}", "x\u{fffd}");
    let result = &made["result"];
    assert_eq!(
        (result["stdout"].as_str(), result["stderr"].as_str()),
        (Some(want.0), Some(want.1)),
        "create's JSON result: {made}"
    );
    let exec = format!("/v1/sandboxes/{id}/exec");
    let body = json!({"cmd": CUT}).to_string();
    let r = or.send("POST", &exec, &[], &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["stdout"].as_str(), v["stderr"].as_str()),
        (Some(want.0), Some(want.1)),
        "exec's JSON result: {v}"
    );
    let r = or.send("POST", &exec, &[("accept", "application/x-ndjson")], &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let events = lines(&r.body);
    check_framing(&events, 0);
    assert_eq!(
        (output(&events, "stdout"), output(&events, "stderr")),
        (want.0.to_owned(), want.1.to_owned()),
        "exec's NDJSON events: {events:?}"
    );
    let create = json!({"template": "default", "run": {"cmd": CUT}}).to_string();
    let r = or.send(
        "POST",
        "/v1/sandboxes",
        &[("accept", "application/x-ndjson")],
        &create,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let events = lines(&r.body);
    check_framing(&events, 0);
    assert_eq!(
        (output(&events, "stdout"), output(&events, "stderr")),
        (want.0.to_owned(), want.1.to_owned()),
        "create's NDJSON events: {events:?}"
    );
}
