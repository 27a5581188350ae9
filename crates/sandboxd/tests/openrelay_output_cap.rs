//! OpenRelay run output (streamed create, streamed and JSON exec) delivers every byte up
//! to its 4 MiB cap, in order and without holes, to a fast or a slow reader; past the
//! cap the result is that clean prefix with `truncated: true` (the command runs on).

mod openrelay;
mod seq_data;
mod serve_bin;

use serve_bin::rss_kib;

use openrelay::{check_framing, lines, output, Or, Stream};
use seq_data::{assert_same, seq_cmd, seq_prefix};
use serde_json::{json, Value};
use std::time::Duration;

const CAP: usize = 4 * 1024 * 1024;

/// Checks a streamed run: framing, the output, and the exit event.
fn check_run(events: &[Value], want: &[u8], truncated: bool, what: &str) {
    check_framing(events, 0);
    assert_same(output(events, "stdout").as_bytes(), want, what);
    let exit = events.last().expect("exit");
    assert_eq!(
        (&exit["exitCode"], &exit["truncated"], &exit["error"]),
        (&json!(0), &json!(truncated), &Value::Null),
        "{what}"
    );
}

#[test]
fn a_fast_producer_gets_every_byte_up_to_the_cap() {
    let data = tempfile::tempdir().expect("temp dir");
    let or = Or::start(data.path(), &[]);
    let want = seq_prefix(CAP);
    let sb = or.create(&json!({"template": "default"}));
    let exec = format!("/v1/sandboxes/{}/exec", sb["id"].as_str().expect("id"));
    for (len, truncated) in [(CAP, false), (CAP + 1, true), (3 * CAP, true)] {
        let body = json!({"cmd": seq_cmd(len)}).to_string();
        let r = or.send("POST", &exec, &[("accept", "application/x-ndjson")], &body);
        assert_eq!(r.status, 200, "{}", r.text());
        check_run(&lines(&r.body), &want, truncated, &format!("exec of {len}"));
        let r = or.send("POST", &exec, &[], &body);
        assert_eq!(r.status, 200, "{}", r.text());
        let result = r.json();
        assert_same(
            result["stdout"].as_str().expect("stdout").as_bytes(),
            &want,
            &format!("JSON exec of {len}"),
        );
        assert_eq!(result["truncated"], json!(truncated), "JSON exec of {len}");
    }
    let body = json!({"template": "default", "run": {"cmd": seq_cmd(3 * CAP)}});
    let r = or.send(
        "POST",
        "/v1/sandboxes",
        &[("accept", "application/x-ndjson")],
        &body.to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    check_run(&lines(&r.body), &want, true, "streamed create");
}

#[test]
fn a_slow_reader_gets_every_byte_up_to_the_cap() {
    let data = tempfile::tempdir().expect("temp dir");
    let or = Or::start(data.path(), &[]);
    let pid = or.server.pid();
    let before = rss_kib(pid);
    let body = json!({"template": "default", "run": {"cmd": seq_cmd(3 * CAP)}});
    // The server's RSS, sampled while it waits for the slow reader.
    let reading = std::sync::atomic::AtomicBool::new(true);
    let (events, peak) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = 0;
            while reading.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(100));
            }
            peak
        });
        let events = Stream::open(&or, "/v1/sandboxes", &[], &body.to_string())
            .finish_slowly(64 * 1024, Duration::from_millis(50));
        reading.store(false, std::sync::atomic::Ordering::Relaxed);
        (events, sampler.join().expect("sampler"))
    });
    check_run(&events, &seq_prefix(CAP), true, "slow streamed create");
    eprintln!("server RSS {before} KiB before, peak {peak} KiB while the reader lagged");
    // Bounded by the cap, not by the 12 MiB the command wrote: the run keeps its result
    // (up to the 4 MiB cap, returned whole in the last event) and renders it as JSON.
    assert!(
        peak < before + 6 * 4 * 1024,
        "{peak} KiB at peak, {before} KiB before"
    );
}
