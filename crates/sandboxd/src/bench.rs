//! `sandboxd bench`: measures sandboxd against baselines taken in the same run and
//! reports medians and ratios (these machines are noisy; absolute times move).

use anyhow::{Context, Result};
use clap::Args;
use sandboxd_agent_protocol::{AgentClient, ExecRequest};
use sandboxd_runtime::linux::LinuxRuntime;
use sandboxd_runtime::{NetworkSpec, Runtime, SandboxHandle, SandboxSpec};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct BenchArgs {
    /// Data directory for the sandboxes the benchmark makes.
    #[arg(long, default_value = "./.sandboxd-bench")]
    pub data_dir: PathBuf,
    /// Samples per latency measure.
    #[arg(long, default_value_t = 30)]
    pub samples: usize,
    /// Idle sandboxes to hold at once for the memory measure.
    #[arg(long, default_value_t = 200)]
    pub idle: usize,
}

/// One reported line: a measure, its median, and its ratio to a baseline.
struct Row {
    name: &'static str,
    median: Duration,
    baseline: Option<(&'static str, Duration, f64)>,
}

pub fn main(args: BenchArgs) -> Result<()> {
    // Quiet unless asked: `RUST_LOG=sandboxd_runtime=debug` shows each start's phases.
    if std::env::var_os("RUST_LOG").is_some() {
        crate::serve::init_logging();
    }
    let runtime = crate::runtime::open_linux(&args.data_dir, None)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let n = args.samples.max(3);

    let fork_exec = median(n * 4, || {
        let t = Instant::now();
        Command::new("/bin/true")
            .status()
            .context("running /bin/true")?;
        Ok(t.elapsed())
    })?;
    let unshare = median(n, || {
        let t = Instant::now();
        let ok = Command::new("unshare")
            .args(["--fork", "--pid", "--mount-proc", "/bin/true"])
            .status()
            .context("running unshare")?;
        anyhow::ensure!(ok.success(), "unshare failed: {ok}");
        Ok(t.elapsed())
    })?;

    let create_bare = create_first_exec(&runtime, &rt, n, None, 0)?;
    let create = create_first_exec(&runtime, &rt, n, None, DISK_MB)?;
    let egress = NetworkSpec::egress(vec![]);
    let create_egress = create_first_exec(&runtime, &rt, n, Some(&egress), DISK_MB)?;
    let warm_runtime =
        crate::runtime::open_linux(&args.data_dir, None)?.with_warm_inits(WARM_INITS);
    warm_runtime.fill_warm_inits(DISK_MB, false);
    let create_warm = create_first_exec(&warm_runtime, &rt, n, None, DISK_MB)?;
    drop(warm_runtime);
    // A server whose default is egress keeps its warm inits wired.
    let wired_runtime =
        crate::runtime::open_linux(&args.data_dir, None)?.with_warm_inits(WARM_INITS);
    wired_runtime.fill_warm_inits(DISK_MB, true);
    let create_warm_egress = create_first_exec(&wired_runtime, &rt, n, Some(&egress), DISK_MB)?;
    drop(wired_runtime);

    let handle = runtime.start(&spec())?;
    let exec = median(n * 4, || {
        let t = Instant::now();
        rt.block_on(exec_true(&handle))?;
        Ok(t.elapsed())
    });
    runtime.destroy(&handle)?;
    let exec = exec?;

    let per_idle = idle_memory(&runtime, &rt, args.idle)?;
    let http = crate::bench_http::measure(n, "none")?;
    let http_egress = crate::bench_http::measure(n, "egress")?;

    let rows = [
        Row {
            name: "baseline: fork+exec /bin/true",
            median: fork_exec,
            baseline: None,
        },
        Row {
            name: "baseline: unshare --fork --pid --mount-proc /bin/true",
            median: unshare,
            baseline: None,
        },
        Row {
            name: "create -> first exec answered (loopback, no disk limit)",
            median: create_bare,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "create -> first exec answered (loopback only)",
            median: create,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "create -> first exec answered (egress network)",
            median: create_egress,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "create -> first exec answered (warm init, loopback only)",
            median: create_warm,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "create -> first exec answered (warm init wired, egress)",
            median: create_warm_egress,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "exec round trip /bin/true",
            median: exec,
            baseline: Some(("fork+exec", fork_exec, 3.0)),
        },
        Row {
            name: "HTTP: create -> RUNNING -> first exec (loopback, spaced)",
            median: http.create_first_exec,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "HTTP: create -> RUNNING -> first exec (loopback, burst)",
            median: http.create_first_exec_burst,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "HTTP: create -> RUNNING -> first exec (egress, spaced)",
            median: http_egress.create_first_exec,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "HTTP: create -> RUNNING -> first exec (egress, burst)",
            median: http_egress.create_first_exec_burst,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "HTTP: exec round trip /bin/true (keep-alive)",
            median: http.exec_round_trip,
            baseline: Some(("fork+exec", fork_exec, 3.0)),
        },
    ];
    println!(
        "{:<58} {:>12} {:>10} {:>8}",
        "measure", "median", "ratio", "target"
    );
    for row in &rows {
        let (ratio, target) = match row.baseline {
            Some((base, d, target)) => (
                format!("{:.2}x {base}", row.median.as_secs_f64() / d.as_secs_f64()),
                format!("<= {target}x"),
            ),
            None => (String::new(), String::new()),
        };
        println!(
            "{:<58} {:>10.3}ms {:>10} {:>8}",
            row.name,
            ms(row.median),
            ratio,
            target
        );
    }
    println!(
        "{:<58} {:>10.2}MiB {:>10} {:>8}",
        format!("host memory per idle sandbox ({} running)", args.idle),
        per_idle / (1024.0 * 1024.0),
        "",
        "< 4 MiB"
    );
    Ok(())
}

/// Median of: start a sandbox (with `network`, or loopback only; with a `disk_mb`
/// writable layer, 0 = unlimited) and have it answer
/// one exec of `/bin/true`. The sandboxes are destroyed after the timing. With warm
/// inits, each sample first waits (untimed) until one is ready: it measures a start
/// that finds one, as creates arriving no faster than the pool refills do.
fn create_first_exec(
    runtime: &LinuxRuntime,
    rt: &tokio::runtime::Runtime,
    n: usize,
    network: Option<&NetworkSpec>,
    disk_mb: u32,
) -> Result<Duration> {
    let mut handles = Vec::new();
    let create = median(n, || {
        let deadline = Instant::now() + Duration::from_secs(5);
        let warm = runtime.warm_inits_enabled();
        while warm && runtime.warm_inits_ready() < WARM_INITS && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let t = Instant::now();
        let handle = match network {
            Some(net) => runtime.start_with_network(&SandboxSpec { disk_mb, ..spec() }, net)?,
            None => runtime.start(&SandboxSpec { disk_mb, ..spec() })?,
        };
        handles.push(handle.clone());
        rt.block_on(exec_true(&handle))?;
        Ok(t.elapsed())
    });
    for h in handles.drain(..) {
        runtime.destroy(&h)?;
    }
    create
}

/// Warm inits of the warm-start measures (the server's default).
const WARM_INITS: usize = 2;

/// The writable layer's size limit the server gives sandboxes by default (10 GiB).
const DISK_MB: u32 = 10 * 1024;

fn spec() -> SandboxSpec {
    SandboxSpec {
        id: uuid::Uuid::new_v4(),
        image: "default".into(),
        extra_layers: vec![],
        hostname: "bench".into(),
        vcpu: 1,
        memory_mb: 256,
        pids_max: 256,
        disk_mb: DISK_MB,
    }
}

async fn exec_true(handle: &SandboxHandle) -> Result<()> {
    let client = AgentClient::new(&handle.agent_socket);
    let out = client
        .exec(&ExecRequest {
            argv: vec!["/bin/true".into()],
            env: None,
            cwd: None,
            timeout_ms: 10_000,
            max_output_bytes: 1 << 20,
        })
        .await?;
    anyhow::ensure!(
        out.exit_code == Some(0),
        "/bin/true failed in the sandbox: {out:?}"
    );
    Ok(())
}

/// Host memory in use (MemTotal - MemAvailable), bytes.
fn host_memory_used() -> Result<f64> {
    let info = std::fs::read_to_string("/proc/meminfo")?;
    let field = |name: &str| -> Result<f64> {
        let line = info
            .lines()
            .find(|l| l.starts_with(name))
            .context("meminfo field")?;
        let kb: f64 = line
            .split_whitespace()
            .nth(1)
            .context("meminfo value")?
            .parse()?;
        Ok(kb * 1024.0)
    };
    Ok(field("MemTotal:")? - field("MemAvailable:")?)
}

/// Starts `count` idle sandboxes (each answered one exec) and returns the growth of
/// host memory in use divided by `count`.
fn idle_memory(runtime: &impl Runtime, rt: &tokio::runtime::Runtime, count: usize) -> Result<f64> {
    std::thread::sleep(Duration::from_millis(500));
    let before = host_memory_used()?;
    let mut handles = Vec::with_capacity(count);
    let result = (|| {
        for _ in 0..count {
            let h = runtime.start(&spec())?;
            handles.push(h.clone());
            rt.block_on(exec_true(&h))?;
        }
        std::thread::sleep(Duration::from_millis(1000));
        Ok::<_, anyhow::Error>(host_memory_used()? - before)
    })();
    for h in &handles {
        runtime.destroy(h)?;
    }
    Ok(result? / count as f64)
}

fn median(n: usize, mut sample: impl FnMut() -> Result<Duration>) -> Result<Duration> {
    let mut all = (0..n).map(|_| sample()).collect::<Result<Vec<_>>>()?;
    all.sort();
    Ok(all[all.len() / 2])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
