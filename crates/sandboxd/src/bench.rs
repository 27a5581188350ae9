//! `sandboxd bench`: measures sandboxd against baselines taken in the same run and
//! reports medians and ratios (these machines are noisy; absolute times move).

use crate::bench_base::{self, Paired, PairedSamples};
use anyhow::{Context, Result};
use clap::Args;
use sandboxd_agent_protocol::{AgentClient, ExecRequest};
use sandboxd_runtime::linux::LinuxRuntime;
use sandboxd_runtime::linux::DEFAULT_MAX_PTYS;
use sandboxd_runtime::{NetworkSpec, Runtime, SandboxHandle, SandboxSpec};
use std::path::PathBuf;
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
    #[arg(long, default_value_t = 1000)]
    pub idle: usize,
    /// Concurrent create -> exec -> destroy sequences through HTTP for the load measure.
    #[arg(long, default_value_t = 100)]
    pub load: usize,
    /// Only the image measures (pulls, image starts, layer sharing; `bench_images`).
    #[arg(long)]
    pub images_only: bool,
    /// Only the gVisor tier's rows (needs runsc; see bench_gvisor.rs).
    #[arg(long)]
    pub gvisor: bool,
    /// Only the "fast on every path" rows: one-shot runs, policy creates and bursts
    /// (`bench_speed`).
    #[arg(long)]
    pub speed_only: bool,
    /// Only the HTTP warm-path rows (spaced creates, bursts, exec round trip) on a
    /// loopback and an egress server (`bench_http`).
    #[arg(long, hide = true)]
    pub http_only: bool,
    /// Only the terminal throughput row (`bench_terminal`).
    #[arg(long)]
    pub terminal_only: bool,
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
    if args.images_only {
        return crate::bench_images::main(args.samples.max(3));
    }
    if args.speed_only {
        let speed = crate::bench_speed::measure(args.samples.max(3), &args.data_dir)?;
        crate::bench_speed::print(&speed);
        return Ok(());
    }
    if args.terminal_only {
        return crate::bench_terminal::main(args.samples.max(3));
    }
    if args.http_only {
        return crate::bench_http::main(args.samples.max(3));
    }
    if args.gvisor {
        return crate::bench_gvisor::main(&args.data_dir, args.samples);
    }
    let runtime = crate::runtime::open_linux(&args.data_dir, None, DEFAULT_MAX_PTYS)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let n = args.samples.max(3);

    let fork_exec = median(n * 4, bench_base::fork_exec)?;
    let unshare = median(n, bench_base::unshare)?;

    let run_egress = bench_base::paired(
        n,
        || bench_base::sandboxd_run(&args.data_dir, "egress"),
        bench_base::bwrap,
    )?;
    let run_none = bench_base::paired(
        n,
        || bench_base::sandboxd_run(&args.data_dir, "none"),
        bench_base::bwrap,
    )?;

    let create_bare = create_first_exec(&runtime, &rt, n, None, 0)?;
    let create = create_first_exec(&runtime, &rt, n, None, DISK_MB)?;
    let egress = NetworkSpec::egress(vec![]);
    let create_egress = create_first_exec(&runtime, &rt, n, Some(&egress), DISK_MB)?;
    let warm_runtime = crate::runtime::open_linux(&args.data_dir, None, DEFAULT_MAX_PTYS)?
        .with_warm_inits(WARM_INITS);
    warm_runtime.fill_warm_inits(DISK_MB, false);
    let create_warm = create_first_exec(&warm_runtime, &rt, n, None, DISK_MB)?;
    drop(warm_runtime);
    // A server whose default is egress keeps its warm inits wired.
    let wired_runtime = crate::runtime::open_linux(&args.data_dir, None, DEFAULT_MAX_PTYS)?
        .with_warm_inits(WARM_INITS);
    wired_runtime.fill_warm_inits(DISK_MB, true);
    let create_warm_egress = create_first_exec(&wired_runtime, &rt, n, Some(&egress), DISK_MB)?;
    drop(wired_runtime);

    let handle = runtime.start(&spec())?;
    let mut execs = PairedSamples::default();
    let exec = (0..n * 4).try_for_each(|_| {
        let base = bench_base::fork_exec()?;
        let t = Instant::now();
        rt.block_on(exec_true(&handle))?;
        execs.push(t.elapsed(), base);
        Ok::<_, anyhow::Error>(())
    });
    runtime.destroy(&handle)?;
    exec?;
    let exec = execs.medians();

    let per_idle = idle_memory(&runtime, &rt, args.idle)?;
    let http = crate::bench_http::measure(n, "none")?;
    let http_egress = crate::bench_http::measure(n, "egress")?;
    let load = crate::bench_http::load(args.load)?;
    let speed = crate::bench_speed::measure(n, &args.data_dir)?;

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
            name: "sandboxd run -- /bin/true (egress network, default)",
            median: run_egress.median,
            baseline: Some(("bwrap*", run_egress.baseline, 3.0)),
        },
        Row {
            name: "sandboxd run --network none -- /bin/true",
            median: run_none.median,
            baseline: Some(("bwrap*", run_none.baseline, 3.0)),
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
            median: exec.median,
            baseline: Some(("fork+exec*", exec.baseline, 3.0)),
        },
        Row {
            name: "HTTP: create -> RUNNING -> first exec (loopback, spaced)",
            median: http.create_first_exec.median,
            baseline: Some(("unshare*", http.create_first_exec.baseline, 5.0)),
        },
        Row {
            name: "HTTP: create -> RUNNING -> first exec (loopback, burst)",
            median: http.create_first_exec_burst,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "HTTP: create -> RUNNING -> first exec (loopback, 2nd burst)",
            median: http.create_first_exec_burst_again,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "HTTP: create -> RUNNING -> first exec (egress, spaced)",
            median: http_egress.create_first_exec.median,
            baseline: Some(("unshare*", http_egress.create_first_exec.baseline, 5.0)),
        },
        Row {
            name: "HTTP: create -> RUNNING -> first exec (egress, burst)",
            median: http_egress.create_first_exec_burst,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "HTTP: create -> RUNNING -> first exec (egress, 2nd burst)",
            median: http_egress.create_first_exec_burst_again,
            baseline: Some(("unshare", unshare, 5.0)),
        },
        Row {
            name: "HTTP: exec round trip /bin/true (keep-alive)",
            median: http.exec_round_trip.median,
            baseline: Some(("fork+exec*", http.exec_round_trip.baseline, 3.0)),
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
    let (per_idle_host, per_idle_charged) = per_idle;
    for (what, bytes) in [
        ("host memory per idle sandbox", per_idle_host),
        ("memory cgroup per idle sandbox", per_idle_charged),
    ] {
        println!(
            "{:<58} {:>10.2}MiB {:>10} {:>8}",
            format!("{what} ({} running)", args.idle),
            bytes / (1024.0 * 1024.0),
            "",
            "< 4 MiB"
        );
    }
    let (p50, p99) = (load.create_quantile(0.5), load.create_quantile(0.99));
    println!(
        "{:<58} {:>10.3}ms {:>10} {:>8}",
        format!(
            "HTTP: {} concurrent create->exec->destroy, create p50",
            load.sequences
        ),
        ms(p50),
        "",
        ""
    );
    println!(
        "{:<58} {:>10.3}ms {:>10} {:>8}",
        "  ... create p99",
        ms(p99),
        format!(
            "{:.2}x p50",
            p99.as_secs_f64() / p50.as_secs_f64().max(1e-9)
        ),
        "<= 3x"
    );
    println!(
        "{:<58} {:>12} {:>10} {:>8}",
        "  ... sequences failed",
        format!("{} of {}", load.failures, load.sequences),
        "",
        "0"
    );
    let paired: [(&str, Paired); 6] = [
        ("sandboxd run, egress", run_egress),
        ("sandboxd run, none", run_none),
        ("exec round trip", exec),
        ("HTTP loopback spaced", http.create_first_exec),
        ("HTTP egress spaced", http_egress.create_first_exec),
        ("HTTP exec round trip", http.exec_round_trip),
    ];
    crate::bench_speed::print(&speed);
    println!("* ratio to baseline samples taken in turn with the row's own; their medians:");
    for (name, p) in paired {
        println!("    {name}: {:.3}ms", ms(p.baseline));
    }
    crate::bench_images::main(n)
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
        isolation: Default::default(),
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
            user: None,
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
/// Memory per idle sandbox, in bytes: what the host's used memory grew by while `count`
/// of them ran (noisy: the rest of a shared machine moves it too), and the median of
/// what each one's memory cgroup is charged (its own processes, page cache and kernel
/// memory: not moved by anything else).
fn idle_memory(
    runtime: &impl Runtime,
    rt: &tokio::runtime::Runtime,
    count: usize,
) -> Result<(f64, f64)> {
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
        let host = host_memory_used()? - before;
        let mut charged = handles
            .iter()
            .map(|h| runtime.usage(h).map(|u| u.memory_bytes))
            .collect::<Result<Vec<_>, _>>()?;
        charged.sort_unstable();
        let median = charged.get(charged.len() / 2).copied().unwrap_or(0);
        Ok::<_, anyhow::Error>((host / count as f64, median as f64))
    })();
    for h in &handles {
        runtime.destroy(h)?;
    }
    result
}

fn median(n: usize, mut sample: impl FnMut() -> Result<Duration>) -> Result<Duration> {
    let mut all = (0..n).map(|_| sample()).collect::<Result<Vec<_>>>()?;
    all.sort();
    Ok(all[all.len() / 2])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
