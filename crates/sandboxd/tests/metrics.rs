//! Prometheus metrics against a real `sandboxd serve`: the exposition passes `promtool
//! check metrics`, counters move as operations happen, label values come from closed
//! sets, the Grafana dashboard queries only metrics that exist, and a real Prometheus
//! (configured from deploy/prometheus.yml) scrapes the server and answers queries.

mod exposition;
mod serve_bin;

use exposition::{queryable_names, samples, scrape, value, MASTER};
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A small sandbox's create body, named `name`.
fn small(name: &str) -> Value {
    json!({"name": name, "vcpu": 1, "memoryMb": 256})
}

/// `promtool check metrics` on `text`: (success, its output).
fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/setup.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn exposition_passes_promtool_and_counters_move() {
    let dir = tempfile::tempdir().unwrap();
    let (server, metrics) = exposition::start(dir.path(), &[]);
    let reaper = exposition::Reaper::new(&server);
    let (kind, before) = scrape(metrics);
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let (ok, said) = promtool_check(&before);
    assert!(ok, "promtool check metrics failed:\n{said}\n{before}");

    let created = || {
        value(
            &scrape(metrics).1,
            "sandboxd_operations_total",
            &[("operation", "create"), ("outcome", "ok")],
        )
    };
    assert_eq!(created(), 0.0);
    let a = reaper.keep(server.create_sandbox(MASTER, &small("a")));
    assert_eq!(created(), 1.0);
    let b = reaper.keep(server.create_sandbox(MASTER, &small("b")));
    assert_eq!(created(), 2.0);

    let text = scrape(metrics).1;
    assert_eq!(
        value(
            &text,
            "sandboxd_sandboxes",
            &[("state", "running"), ("tier", "container")]
        ),
        2.0
    );
    assert_eq!(
        value(&text, "sandboxd_sandboxes", &[("tier", "gvisor")]),
        0.0
    );
    assert_eq!(
        value(&text, "sandboxd_create_duration_seconds_count", &[]),
        2.0
    );
    // Each start took a warm init or found none (the server keeps two by default).
    let hits = value(&text, "sandboxd_warm_pool_hits_total", &[]);
    let misses = value(&text, "sandboxd_warm_pool_misses_total", &[]);
    assert_eq!(hits + misses, 2.0, "{text}");
    // What the pool aims to hold: at least its base of two (more once a burst grew it).
    let target = value(&text, "sandboxd_warm_pool_target", &[("tier", "container")]);
    assert!(target >= 2.0, "warm pool target {target}: {text}");
    let starts = |start| {
        value(
            &text,
            "sandboxd_create_duration_seconds_count",
            &[("start", start)],
        )
    };
    assert_eq!((starts("warm"), starts("cold")), (hits, misses));
    let http_creates = value(
        &text,
        "sandboxd_http_requests_total",
        &[
            ("dialect", "inngest"),
            ("route", "/v2/sandboxes"),
            ("method", "POST"),
            ("status", "201"),
        ],
    );
    assert_eq!(http_creates, 2.0);

    // exec, pause, resume, snapshot, destroy and a failed create all count.
    let (code, out) = server.exec(MASTER, &a, &["/bin/echo", "hi"]);
    assert_eq!((code, out.trim()), (0, "hi"));
    let text = scrape(metrics).1;
    let execs = |text: &str, mode| {
        value(
            text,
            "sandboxd_exec_duration_seconds_count",
            &[("mode", mode)],
        )
    };
    assert_eq!(
        (execs(&text, "captured"), execs(&text, "streamed")),
        (1.0, 0.0)
    );
    // OpenRelay's exec streams in the engine (even when its reply is one JSON body):
    // it is timed as a streamed exec, once, by the time its reply has come.
    let reply = server.request(
        "POST",
        &format!("/v1/sandboxes/{a}/exec"),
        MASTER,
        Some(&json!({"argv": ["/bin/echo", "x"]})),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = scrape(metrics).1;
    assert_eq!(
        (execs(&text, "captured"), execs(&text, "streamed")),
        (1.0, 1.0)
    );
    let reply = server.request("POST", &format!("/v2/sandboxes/{a}/pause"), MASTER, None);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = server.request("POST", &format!("/v2/sandboxes/{a}/resume"), MASTER, None);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = server.request(
        "POST",
        &format!("/v2/sandboxes/{b}/snapshots"),
        MASTER,
        Some(&json!({})),
    );
    assert!(reply.status < 300, "{}", reply.text());
    let reply = server.request(
        "POST",
        "/v2/sandboxes",
        MASTER,
        Some(&json!({"name": "a", "vcpu": 1, "memoryMb": 512})),
    );
    assert_eq!(reply.status, 409, "{}", reply.text());
    server.destroy(MASTER, &a);
    let text = scrape(metrics).1;
    for (op, outcome, n) in [
        ("pause", "ok", 1.0),
        ("resume", "ok", 1.0),
        ("snapshot", "ok", 1.0),
        ("destroy", "ok", 1.0),
        ("create", "error", 1.0),
    ] {
        let got = value(
            &text,
            "sandboxd_operations_total",
            &[("operation", op), ("outcome", outcome)],
        );
        assert_eq!(got, n, "{op} {outcome}\n{text}");
    }
    assert_eq!(
        value(&text, "sandboxd_sandboxes", &[("state", "running")]),
        1.0
    );
    assert!(
        value(
            &text,
            "sandboxd_store_operation_duration_seconds_count",
            &[("operation", "update_sandbox")]
        ) > 0.0
    );
    assert!(value(&text, "sandboxd_process_resident_memory_bytes", &[]) > 1e6);
    assert!(value(&text, "sandboxd_process_cpu_seconds_total", &[]) > 0.0);
    assert!(value(&text, "sandboxd_disk_usage_bytes", &[("area", "data_dir")]) > 0.0);
    assert!(value(&text, "sandboxd_disk_usage_bytes", &[("area", "layers")]) > 0.0);

    // Unknown and unmatched paths, bad ids: still a bounded set of label values.
    let wrong = "00000000-0000-4000-8000-000000000000";
    server.request("GET", &format!("/v2/sandboxes/{wrong}"), MASTER, None);
    server.request("GET", "/v1/sandboxes/not-a-uuid", MASTER, None);
    server.request("GET", &format!("/no/such/{wrong}"), MASTER, None);
    server.request("BREW", "/v2/sandboxes", MASTER, None);
    server.destroy(MASTER, &b);

    let text = scrape(metrics).1;
    let (ok, said) = promtool_check(&text);
    assert!(ok, "promtool check metrics failed:\n{said}\n{text}");
    assert_bounded_labels(&text, &[&a, &b, wrong, "not-a-uuid", MASTER]);
}

/// Every label value is one of its label's closed set; no id or key appears anywhere.
fn assert_bounded_labels(text: &str, never: &[&str]) {
    for word in never {
        assert!(!text.contains(word), "{word:?} in the exposition:\n{text}");
    }
    let routes_known = |r: &str| r == "unmatched" || (r.starts_with('/') && !r.contains(".."));
    for (series, _) in samples(text) {
        for (label, v) in &series.labels {
            let ok = match label.as_str() {
                "state" => [
                    "pending",
                    "starting",
                    "running",
                    "pausing",
                    "paused",
                    "resuming",
                    "terminating",
                ]
                .contains(&v.as_str()),
                "tier" => ["container", "gvisor"].contains(&v.as_str()),
                "operation" => match series.name.starts_with("sandboxd_operations") {
                    true => {
                        ["create", "destroy", "pause", "resume", "snapshot"].contains(&v.as_str())
                    }
                    false => v.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                },
                "outcome" => ["ok", "error"].contains(&v.as_str()),
                "start" => ["warm", "cold"].contains(&v.as_str()),
                "mode" => ["captured", "streamed"].contains(&v.as_str()),
                "dialect" => ["inngest", "openrelay", "runzivo", "none"].contains(&v.as_str()),
                "method" => [
                    "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "OTHER",
                ]
                .contains(&v.as_str()),
                "status" => v.len() == 3 && v.bytes().all(|b| b.is_ascii_digit()),
                "area" => ["data_dir", "layers"].contains(&v.as_str()),
                "route" => routes_known(v) && !has_uuid(v),
                "le" => v == "+Inf" || v.parse::<f64>().is_ok(),
                _ => false,
            };
            assert!(ok, "unexpected label {label}={v:?} on {}", series.name);
        }
    }
}

/// Whether `s` holds something shaped like a UUID.
fn has_uuid(s: &str) -> bool {
    s.as_bytes().windows(36).any(|w| {
        w.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
    })
}

#[test]
fn the_grafana_dashboard_queries_only_metrics_that_exist() {
    let dir = tempfile::tempdir().unwrap();
    let (server, metrics) = exposition::start(dir.path(), &[]);
    // One request, so that the HTTP families have a series.
    assert_eq!(
        server.request("GET", "/v2/sandboxes", MASTER, None).status,
        200
    );
    let names = queryable_names(&scrape(metrics).1);
    let path = repo_root().join("deploy/grafana/sandboxd-dashboard.json");
    let dashboard: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let mut used = std::collections::BTreeSet::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    for panel in panels {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{panel}");
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            for name in metric_names(expr) {
                used.insert(name);
            }
        }
    }
    let missing: Vec<_> = used.iter().filter(|n| !names.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries unknown metrics {missing:?}; known: {names:?}"
    );
    for wanted in [
        "sandboxd_sandboxes",
        "sandboxd_create_duration_seconds_bucket",
        "sandboxd_http_requests_total",
    ] {
        assert!(
            used.contains(wanted),
            "the dashboard does not show {wanted}"
        );
    }
}

/// The `sandboxd_…` identifiers of a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("sandboxd_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        out.push(expr[start..end].to_owned());
        i = end;
    }
    out
}

#[test]
fn a_grafana_check_catches_an_unknown_metric() {
    let names = queryable_names("# TYPE sandboxd_x counter\nsandboxd_x_total 1\n");
    assert!(names.contains("sandboxd_x_total"));
    assert_eq!(
        metric_names("rate(sandboxd_nope_total[5m]) / sandboxd_x_total"),
        ["sandboxd_nope_total", "sandboxd_x_total"]
    );
    assert!(!names.contains("sandboxd_nope_total"));
}

/// A Prometheus this test started; killed (by PID) and its storage removed when dropped.
struct Prometheus {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port, scraping `target` every second with
    /// deploy/prometheus.yml's job (checked with `promtool check config` first).
    fn start(target: std::net::SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let deploy = std::fs::read_to_string(repo_root().join("deploy/prometheus.yml")).unwrap();
        assert!(deploy.contains("127.0.0.1:9464") && deploy.contains("scrape_interval: 15s"));
        let config = deploy
            .replace("127.0.0.1:9464", &target.to_string())
            .replace("scrape_interval: 15s", "scrape_interval: 1s");
        let path = dir.path().join("prometheus.yml");
        std::fs::write(&path, config).unwrap();
        for file in [repo_root().join("deploy/prometheus.yml"), path.clone()] {
            let out = Command::new("promtool")
                .args(["check", "config"])
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package prometheus)");
        Prometheus {
            child,
            addr: port,
            _dir: dir,
        }
    }

    /// An instant query's result vector.
    fn query(&self, promql: &str) -> Vec<Value> {
        let q: String = promql
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        // Not up yet: nothing (serve_bin::http panics on a refused connection).
        if std::net::TcpStream::connect(self.addr).is_err() {
            return Vec::new();
        }
        let reply = serve_bin::http(
            self.addr,
            "GET",
            &format!("/api/v1/query?query={q}"),
            &[],
            "",
        );
        let v = reply.json();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Polls `promql` until `good` holds for its result (Prometheus scrapes every
    /// second); fails after two minutes.
    fn wait_for(&self, promql: &str, good: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let mut last = Vec::new();
        for _ in 0..240 {
            last = self.query(promql);
            if good(&last) {
                return last;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        panic!("{promql}: never as expected; last {last:?}");
    }
}

fn number(v: &Value) -> f64 {
    v["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

#[test]
fn a_real_prometheus_scrapes_sandbox_counts_and_create_latency() {
    let dir = tempfile::tempdir().unwrap();
    let (server, metrics) = exposition::start(dir.path(), &[]);
    let reaper = exposition::Reaper::new(&server);
    let prometheus = Prometheus::start(metrics);
    prometheus.wait_for("up{job=\"sandboxd\"}", |r| {
        r.first().is_some_and(|v| number(v) == 1.0)
    });
    let ids: Vec<String> = (0..3)
        .map(|n| reaper.keep(server.create_sandbox(MASTER, &small(&format!("p{n}")))))
        .collect();
    let running = prometheus.wait_for("sum(sandboxd_sandboxes{state=\"running\"})", |r| {
        r.first().is_some_and(|v| number(v) == 3.0)
    });
    assert_eq!(number(&running[0]), 3.0);
    let count = prometheus.wait_for("sum(sandboxd_create_duration_seconds_count)", |r| {
        r.first().is_some_and(|v| number(v) == 3.0)
    });
    assert_eq!(number(&count[0]), 3.0);
    let buckets = prometheus.query("sandboxd_create_duration_seconds_bucket{le=\"+Inf\"}");
    assert!(!buckets.is_empty(), "no create-latency buckets");
    let starts: Vec<&str> = buckets
        .iter()
        .filter_map(|b| b["metric"]["start"].as_str())
        .collect();
    assert!(
        starts.iter().all(|s| *s == "warm" || *s == "cold"),
        "{starts:?}"
    );
    let p50 = prometheus.wait_for(
        "histogram_quantile(0.5, sum by (le) (sandboxd_create_duration_seconds_bucket))",
        |r| r.first().is_some_and(|v| number(v) > 0.0),
    );
    assert!(number(&p50[0]).is_finite());
    for id in &ids {
        server.destroy(MASTER, id);
    }
    prometheus.wait_for("sum(sandboxd_sandboxes{state=\"running\"})", |r| {
        r.first().is_some_and(|v| number(v) == 0.0)
    });
    let destroyed = prometheus.wait_for(
        "sandboxd_operations_total{operation=\"destroy\",outcome=\"ok\"}",
        |r| r.first().is_some_and(|v| number(v) == 3.0),
    );
    assert_eq!(number(&destroyed[0]), 3.0);
}

#[test]
fn metrics_listener_none_serves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_bin::Server::start(dir.path(), Some(MASTER));
    assert!(server
        .log_lines()
        .iter()
        .all(|l| !l.contains("metrics at http://")));
    // The API does not serve /metrics.
    let reply = server.request("GET", "/metrics", MASTER, None);
    assert_eq!(reply.status, 404, "{}", reply.text());
}
