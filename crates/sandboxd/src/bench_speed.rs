//! `sandboxd bench` rows of the "fast on every path" work: through a real egress
//! `sandboxd serve`, spaced creates with a workspace egress policy beside the same
//! without one, and bursts of concurrent creates (the whole burst's time and its
//! throughput, beside one spaced create); one-shot `sandboxd run -- /bin/true` beside
//! bubblewrap, alone on the host and beside that server; and `runsc do /bin/true` for
//! scale.

use crate::bench_base::{self, median, Paired, PairedSamples};
use crate::bench_http::{Api, Serve, CREATE_SPACING};
use crate::serve::DATABASE_FILE;
use anyhow::{Context, Result};
use sandboxd_engine::{egress, EgressPolicy, DEFAULT_WORKSPACE};
use std::process::Command;
use std::time::{Duration, Instant};

/// Sandboxes in one burst of concurrent creates.
pub const BURST: usize = 20;

/// What was measured.
pub struct SpeedFigures {
    /// Spaced creates → first exec with a workspace policy (samples) in turn with the
    /// same without one (baseline).
    pub policy_creates: Paired,
    /// Spaced creates → first exec without a policy: the "one spaced create" a burst
    /// is compared with.
    pub spaced: Duration,
    /// [`BURST`] concurrent creates → first exec, each on its own connection: the whole
    /// burst, first once the server reported the pool it grew at its start full
    /// (`warm_inits_start`), then again once it reported the pool that grew for the
    /// first burst full again.
    pub burst: Duration,
    pub burst_again: Duration,
    /// From the server's spawn until it reported its pool full, and the pool's size
    /// then.
    pub pool_filled: (Duration, u64),
    /// `runsc do /bin/true` (gVisor), when runsc is installed.
    pub runsc: Option<Duration>,
    /// `sandboxd run [--network none] -- /bin/true` in turn with bubblewrap, no server
    /// running on the bench's data dir, and (egress) while the bench's server runs.
    pub run_egress: Paired,
    pub run_none: Paired,
    pub run_beside: Paired,
    /// The egress run that finds no shared table (made by its start, removed after its
    /// end: parked networks linger 0 s), as the first run after an idle spell does.
    pub run_idle: Paired,
}

/// A run that finds no shared table: its parked network lingers 0 s, and the next
/// sample waits (up to 5 s, then fails) until its reaper removed the table.
fn run_after_idle(run_dir: &std::path::Path) -> Result<Duration> {
    let took = bench_base::sandboxd_run_with(run_dir, "egress", &[(LINGER_ENV, "0")])?;
    anyhow::ensure!(
        table_gone_within(Duration::from_secs(5), Duration::from_millis(5)),
        "the shared nftables table outlived its last run by 5 s: the next sample would find it"
    );
    Ok(took)
}

/// Whether the host's shared table is gone, or goes within `limit` (looked at every
/// `every`).
fn table_gone_within(limit: Duration, every: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while sandboxd_runtime::linux::shared_table_exists() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
    true
}

/// How long parked networks linger untaken (see the runtime's `parked::linger`).
const LINGER_ENV: &str = "SANDBOXD_NET_LINGER_SECS";

/// Waits until the host holds no shared table, as the idle row needs: the egress
/// networks a `sandboxd run` parked shortly before the bench go once they have
/// lingered untaken, and the table with the last of them. A server running on the host
/// keeps its spare networks, and so the table, for as long as it runs: refused then,
/// with what to do. (The linger waited for is this process's; a network parked under a
/// longer one, or whose reaper was killed, outlasts the wait: the refusal names those
/// too.)
fn wait_for_idle_host() -> Result<()> {
    if !sandboxd_runtime::linux::shared_table_exists() {
        return Ok(());
    }
    let longest = sandboxd_runtime::linux::parked_network_linger() + Duration::from_secs(10);
    eprintln!(
        "bench: waiting (up to {} s) for the egress networks an earlier `sandboxd run` parked \
         to go, so that the idle row finds no shared nftables table",
        longest.as_secs()
    );
    anyhow::ensure!(
        table_gone_within(longest, Duration::from_millis(100)),
        "the shared nftables table (inet sandboxd) stayed for {} s: a sandboxd server \
         running on this host keeps it (stop it to measure the one-shot rows), or \
         networks parked with a longer SANDBOXD_NET_LINGER_SECS than this bench's, \
         or with no reaper running (any sandboxd run or serve starts one again)",
        longest.as_secs()
    );
    Ok(())
}

/// Runs a fresh egress server and measures (see [`SpeedFigures`]); one-shot runs use
/// `run_dir`.
pub fn measure(samples: usize, run_dir: &std::path::Path) -> Result<SpeedFigures> {
    let run = |network| move || bench_base::sandboxd_run(run_dir, network);
    wait_for_idle_host()?;
    let run_idle = bench_base::paired(samples, || run_after_idle(run_dir), bench_base::bwrap)?;
    let run_egress = bench_base::paired(samples, run("egress"), bench_base::bwrap)?;
    let run_none = bench_base::paired(samples, run("none"), bench_base::bwrap)?;
    let short = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let dir = std::env::temp_dir().join(format!("sandboxd-bench-{short}"));
    let key = format!("bench-{}", uuid::Uuid::new_v4().simple());
    // Every create the rows make (policy and plain ones in turn, two bursts) within the
    // create rate's burst: past the default's, `--samples 15` was refused (429).
    let creates = (2 * samples + 2 * BURST + 16).to_string();
    let env = [("SANDBOXD_CREATE_RATE_BURST", creates.as_str())];
    let mut server = Serve::start(&dir, &key, "egress", &env)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let figures = rt.block_on(async {
        let mut api = Api::connect(server.addr, &key).await?;
        let figures = measure_on(&mut api, &server, &key, &dir, samples).await;
        let cleanup = api.destroy_all().await;
        let figures = figures?;
        cleanup.map(|()| figures)
    });
    let run_beside = match figures.is_ok() {
        true => bench_base::paired(samples, run("egress"), bench_base::bwrap),
        false => Ok(Paired::default()),
    };
    server.stop();
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        eprintln!("bench: cannot remove {}: {e}", dir.display());
    }
    let runsc = runsc_do().ok();
    let run_beside = run_beside?;
    figures.map(|f| SpeedFigures {
        runsc,
        run_egress,
        run_none,
        run_beside,
        run_idle,
        ..f
    })
}

/// Sets (`Some`) or clears the default workspace's egress policy in the server's store.
fn set_policy(dir: &std::path::Path, policy: Option<&EgressPolicy>) -> Result<()> {
    let store = sandboxd_store::SqliteStore::open(dir.join(DATABASE_FILE))
        .context("opening the bench server's store")?;
    match policy {
        Some(p) => egress::set_workspace_policy(&store, DEFAULT_WORKSPACE, p)?,
        None => {
            egress::clear_workspace_policy(&store, DEFAULT_WORKSPACE)?;
        }
    }
    Ok(())
}

/// One create → first exec, destroyed afterwards (untimed), after the spacing.
async fn spaced(api: &mut Api) -> Result<Duration> {
    tokio::time::sleep(CREATE_SPACING).await;
    let t = Instant::now();
    let id = api.create().await?;
    api.exec_true(&id).await?;
    let took = t.elapsed();
    api.destroy(&id).await?;
    Ok(took)
}

async fn measure_on(
    api: &mut Api,
    server: &Serve,
    key: &str,
    dir: &std::path::Path,
    n: usize,
) -> Result<SpeedFigures> {
    let addr = server.addr;
    let first = api.create().await?; // imports the image once
    api.exec_true(&first).await?;
    api.destroy(&first).await?;
    // The first burst comes once the server says (in its metrics, as an operator would
    // see it) that the pool it grew at its start is full; then again once the pool that
    // grew for it reports full.
    let pool_filled = server.pool_full().await?;
    let burst = burst_of(addr, key).await?;
    server.pool_full().await?;
    let burst_again = burst_of(addr, key).await?;
    server.pool_full().await?;
    api.reconnect(addr).await?;
    // Documentation ranges: the policy's cost, not its effect, is measured.
    let policy = EgressPolicy {
        allow: vec![],
        deny: vec!["192.0.2.0/24".parse()?, "198.51.100.0/24".parse()?],
    };
    // The first create under a policy teaches the pool that policy (untimed); then
    // samples alternate, each policy create with one without, the policy set and
    // cleared between them (both warm paths stay filled: the pool keeps both kinds).
    set_policy(dir, Some(&policy))?;
    spaced(api).await?;
    let mut creates = PairedSamples::default();
    let mut plain = Vec::with_capacity(n);
    for _ in 0..n {
        set_policy(dir, None)?;
        let without = spaced(api).await?;
        set_policy(dir, Some(&policy))?;
        let with = spaced(api).await?;
        creates.push(with, without);
        plain.push(without);
    }
    set_policy(dir, None)?;
    Ok(SpeedFigures {
        policy_creates: creates.medians(),
        spaced: median(plain),
        burst,
        burst_again,
        pool_filled,
        runsc: None,
        run_egress: Paired::default(),
        run_none: Paired::default(),
        run_beside: Paired::default(),
        run_idle: Paired::default(),
    })
}

/// [`BURST`] create → first exec at once, each on a connection of its own; the time
/// until the last exec answered. The sandboxes are destroyed afterwards (untimed).
async fn burst_of(addr: std::net::SocketAddr, key: &str) -> Result<Duration> {
    let mut apis = Vec::with_capacity(BURST);
    for _ in 0..BURST {
        apis.push(Api::connect(addr, key).await?);
    }
    let t = Instant::now();
    let runs = apis.into_iter().map(|mut api| async move {
        let made = async {
            let id = api.create().await?;
            api.exec_true(&id).await
        }
        .await;
        (api, made)
    });
    let done = futures_util::future::join_all(runs).await;
    let took = t.elapsed();
    let mut first_error = None;
    for (mut api, made) in done {
        if let Err(e) = made {
            first_error.get_or_insert(e);
        }
        api.destroy_all().await?;
    }
    match first_error {
        Some(e) => Err(e.context("a create of the burst")),
        None => Ok(took),
    }
}

/// One `runsc do /bin/true` (gVisor's one-shot run, as root), for scale. Without
/// cgroups (`--ignore-cgroups`): a `runsc do` makes `runsc-<random id>` cgroups in every
/// v1 hierarchy and leaves them when it is killed (a bench stopped mid-sample), and the
/// random id does not tell one sample's from another process's.
fn runsc_do() -> Result<Duration> {
    let mut all = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let ok = Command::new("runsc")
            .args(["--ignore-cgroups", "--network=none", "do", "/bin/true"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .context("running runsc")?;
        anyhow::ensure!(ok.success(), "runsc do failed: {ok}");
        all.push(t.elapsed());
    }
    Ok(median(all))
}

/// Prints the rows, in the format of the other `sandboxd bench` rows.
pub fn print(f: &SpeedFigures) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    let row = |name: &str, value: String, ratio: String, target: &str| {
        println!("{name:<58} {value:>12} {ratio:>10} {target:>8}");
    };
    for (name, run) in [
        (
            "sandboxd run -- /bin/true (egress network, default)",
            f.run_egress,
        ),
        (
            "  ... the same beside a running egress server",
            f.run_beside,
        ),
        ("sandboxd run --network none -- /bin/true", f.run_none),
        (
            "  ... egress, the first after an idle spell (no table yet)",
            f.run_idle,
        ),
    ] {
        row(
            name,
            format!("{:.3}ms", ms(run.median)),
            format!("{:.2}x bwrap", ratio(run.median, run.baseline)),
            "<= 3x",
        );
    }
    row(
        "HTTP: spaced create -> first exec, workspace policy",
        format!("{:.3}ms", ms(f.policy_creates.median)),
        format!(
            "{:.2}x none*",
            ratio(f.policy_creates.median, f.policy_creates.baseline)
        ),
        "<= 1.5x",
    );
    let (filled, size) = f.pool_filled;
    row(
        &format!("HTTP: pool of {size} reported full after the server's spawn"),
        format!("{:.0}ms", ms(filled)),
        String::new(),
        "",
    );
    for (name, took) in [
        ("first (pool full)", f.burst),
        ("2nd (pool regrown, full)", f.burst_again),
    ] {
        row(
            &format!("HTTP: burst of {BURST} concurrent create -> first exec, {name}"),
            format!("{:.3}ms", ms(took)),
            format!("{:.2}x spaced", ratio(took, f.spaced)),
            "<= 10x",
        );
        row(
            "  ... throughput",
            format!("{:.0}/s", BURST as f64 / took.as_secs_f64().max(1e-9)),
            String::new(),
            "",
        );
    }
    if let Some(runsc) = f.runsc {
        row(
            "runsc do /bin/true (gVisor, for scale)",
            format!("{:.3}ms", ms(runsc)),
            String::new(),
            "",
        );
    }
    println!(
        "* policy creates alternate with creates without one (medians {:.3}ms / {:.3}ms); \
         spaced create without policy {:.3}ms; runs alternate with \
         `bwrap --unshare-all` (medians {:.3} / {:.3} / {:.3} / {:.3}ms)",
        ms(f.policy_creates.median),
        ms(f.policy_creates.baseline),
        ms(f.spaced),
        ms(f.run_egress.baseline),
        ms(f.run_beside.baseline),
        ms(f.run_none.baseline),
        ms(f.run_idle.baseline),
    );
}
