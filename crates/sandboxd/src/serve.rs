//! `sandboxd serve`: opens the store, both isolation tiers (Linux containers, and gVisor
//! when `runsc` is there) behind one router, and the engine (re-adopting running
//! sandboxes), then serves every API dialect until SIGTERM or SIGINT.

use anyhow::{Context, Result};
use clap::Args;
use sandboxd_engine::{Engine, EngineConfig};
use sandboxd_runtime::linux::LinuxRuntime;
use sandboxd_runtime::tiers::Tiers;
use sandboxd_runtime::Runtime;
use sandboxd_server::{Isolation, ServerConfig};
use sandboxd_store::SqliteStore;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Most warm gVisor sandboxes a server keeps for creates asking for gVisor when its
/// default is another tier (each is a running sentry and gofer): enough
/// for creates coming one after another, as the container tier's base pool is.
const GVISOR_ON_DEMAND: usize = 2;

/// Name of the database file in the data directory.
pub const DATABASE_FILE: &str = "sandboxd.db";

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:7420, or `listen` of the config file,
    /// or SANDBOXD_LISTEN].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Data directory: database, layers and sandbox state [default: ./.sandboxd].
    #[arg(long = "data-dir")]
    pub data_dir: Option<PathBuf>,
    /// TOML configuration file (`listen`, `data_dir`, `master_key`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Log lines as human-readable `text` or one JSON object per line (`json`).
    #[arg(
        long = "log-format",
        value_enum,
        env = "SANDBOXD_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

pub fn main(args: ServeArgs) -> Result<ExitCode> {
    init_logging_as(args.log_format);
    // Tests' fault injection points (only in builds with the `failpoints` feature).
    sandboxd_runtime::faults::from_env();
    let mut config = ServerConfig::load(args.config.as_deref())?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(dir) = args.data_dir {
        config.data_dir = dir;
    }
    tracing::info!(?config, "starting");
    let tasks = sandboxd_server::config::host_tasks::host_tasks();
    let pids = config.pids_per_sandbox();
    match sandboxd_server::config::host_tasks::oversubscribed(pids, config.max_sandboxes, tasks) {
        Some(warning) => tracing::warn!(pids_per_sandbox = pids, "{warning}"),
        None => tracing::info!(
            pids_per_sandbox = pids,
            "each sandbox may hold {pids} tasks"
        ),
    }
    let tokio = crate::serve_threads::runtime().context("starting the async runtime")?;
    let served = tokio.block_on(run(config));
    // Connections still open past the shutdown grace period, and blocking calls they
    // started, are not waited for: the sandboxes keep running without us.
    tokio.shutdown_timeout(std::time::Duration::from_secs(1));
    served?;
    Ok(ExitCode::SUCCESS)
}

async fn run(config: ServerConfig) -> Result<()> {
    // Before anything is made: a SIGTERM from here on stops the server gracefully (its
    // warm inits drained) once it serves, however early it comes.
    let shutdown = sandboxd_server::shutdown_signal();
    let cap = warm_cap(&config);
    let linux: Arc<LinuxRuntime> = Arc::new(
        crate::runtime::open_linux(
            &config.data_dir,
            config.resolvers.clone(),
            config.max_ptys_per_sandbox,
        )?
        .with_growing_warm_inits(
            (config.warm_inits as usize).min(cap),
            (config.warm_inits_max as usize).min(cap),
        )
        .with_warm_images(config.warm_images as usize)
        .cap_warm_inits(cap),
    );
    if config.isolation == Isolation::Container {
        let limits = config.limits();
        // Warm inits are made for what most creates ask: the default disk and network.
        // (On a gVisor-default server they follow the first container start.)
        let egress = limits.default_network == sandboxd_runtime::NetworkMode::Egress;
        linux.fill_warm_inits(limits.disk_mb_per_sandbox, egress);
        // Grown ahead: the first burst of creates starts warm, as later ones do.
        linux.grow_warm_inits((config.warm_inits_start as usize).min(cap));
    }
    // The gVisor tier is opened at start when runsc is there (it re-adopts and cleans
    // its sandboxes then); without it, gVisor requests are refused with the reason.
    // On a gVisor-default server without default network, `warm_inits` sandboxes run
    // ahead of time for creates of the default image and disk (any name; see
    // gvisor/warm.rs). Any other server keeps none until a gVisor create without
    // network (asked by a request, template or workspace) starts cold; from then on it
    // keeps up to GVISOR_ON_DEMAND of that create's image and disk.
    let limits = config.limits();
    let gvisor_warm = match config.isolation == Isolation::Gvisor
        && limits.default_network == sandboxd_runtime::NetworkMode::None
    {
        true => crate::runtime::GvisorPool::Filled((config.warm_inits as usize).min(cap)),
        false => {
            crate::runtime::GvisorPool::OnDemand((config.warm_inits as usize).min(GVISOR_ON_DEMAND))
        }
    };
    let gvisor = crate::runtime::gvisor_tier(
        &config.data_dir,
        config.resolvers.clone(),
        config.max_ptys_per_sandbox,
        gvisor_warm,
    );
    match (&gvisor, config.isolation) {
        (Err(why), Isolation::Gvisor) => {
            anyhow::bail!("the default isolation tier is gvisor, but {why}")
        }
        (Err(why), Isolation::Container) => {
            tracing::info!(reason = %why, "the gVisor tier is not available")
        }
        (Ok(_), _) => {}
    }
    let gvisor_pool = gvisor.as_ref().ok().cloned();
    let runtime: Arc<dyn Runtime> = Arc::new(Tiers::new(
        linux.clone(),
        gvisor.map(|g| g as Arc<dyn Runtime>),
    ));
    let store = Arc::new(
        SqliteStore::open(config.data_dir.join(DATABASE_FILE))
            .context("opening the sandbox database")?,
    );
    // Readers for a first burst of requests, opened now rather than on its way.
    store.open_readers(STORE_READERS_AHEAD);
    // Keys and sandboxes kept between requests while the database does not change.
    if let Err(e) = store.cache_reads() {
        tracing::warn!(error = %e, "keys and sandboxes are read from the database each time");
    }
    // Its WAL checkpointed on a thread of its own, not inside the commit that fills it
    // (a create's, under admission: every create queued behind it waited for the sync).
    if let Err(e) = store.checkpoint_in_background() {
        tracing::warn!(error = %e, "WAL checkpoints stay inside commits");
    }
    let engine: Arc<Engine> = Engine::open(EngineConfig {
        data_dir: config.data_dir.clone(),
        runtime: runtime.clone(),
        store: store.clone(),
        limits: config.limits(),
    })
    .context("opening the engine")?;
    // Sandboxes of runs killed beside this server are ended within seconds.
    crate::run_orphans::spawn_sweeper(&engine, store, linux.clone(), runtime);
    // Filled once the engine's reconcile is done (it keeps only entries already made).
    if let (Some(gvisor), crate::runtime::GvisorPool::Filled(_)) = (&gvisor_pool, gvisor_warm) {
        gvisor.fill_warm_pool(limits.disk_mb_per_sandbox);
    }
    crate::layer_collector::spawn(config.data_dir.clone(), config.layer_gc);
    let served = sandboxd_server::serve(config, engine, shutdown).await;
    // Sandboxes keep running for the next start; the warm inits and the warm gVisor
    // sandboxes are ours alone.
    tokio::task::spawn_blocking(move || {
        linux.drain_warm_inits();
        if let Some(gvisor) = gvisor_pool {
            gvisor.drain_warm_pool();
        }
    })
    .await?;
    served
}

/// Store readers a server opens at its start: about one per request of a burst of 20
/// (a request reads on one reader at a time).
const STORE_READERS_AHEAD: usize = 16;

/// Host memory one warm init holds, rounded up (measured: ~2.9 MiB private each).
const WARM_INIT_MIB: u64 = 3;

/// The most warm inits a server keeps, sandboxes included: no more than it may run
/// (`max_sandboxes`), and with an autoPause memory budget, no more than an eighth of
/// that budget holds.
fn warm_cap(config: &ServerConfig) -> usize {
    let by_count = config.max_sandboxes as usize;
    match config.auto_pause.memory_budget_mb {
        0 => by_count,
        mib => {
            let by_budget = (mib / 8 / WARM_INIT_MIB) as usize;
            if by_budget == 0 {
                tracing::warn!(
                    memory_budget_mb = mib,
                    "the memory budget leaves no room for warm inits (an eighth of it at {WARM_INIT_MIB} MiB each): every start is cold"
                );
            }
            by_count.min(by_budget)
        }
    }
}

/// Logs text to stderr, `info` unless `RUST_LOG` says otherwise.
pub fn init_logging() {
    init_logging_as(LogFormat::Text);
}

/// Logs to stderr in `format`, `info` unless `RUST_LOG` says otherwise.
pub fn init_logging_as(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
