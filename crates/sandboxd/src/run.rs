//! `sandboxd run`: create a sandbox through the engine (with the server's defaults and
//! limits, disk size included, recorded in the server's store), run one command in it
//! with its output passed through, exit with its status, and destroy the sandbox. An
//! `--image` that is not stored is pulled first.

use crate::serve::DATABASE_FILE;
use anyhow::{bail, Context, Result};
use clap::Args;
use futures_util::{FutureExt, StreamExt};
use sandboxd_engine::{
    CreateSandbox, Engine, EngineConfig, EngineError, ExecEvent, OnCap, Resources, Sandbox,
    StreamCommand, StreamKind, WorkspaceId, DEFAULT_WORKSPACE,
};
use sandboxd_runtime::linux::{HeldInit, LinuxRuntime, Tethers};
use sandboxd_runtime::{NetworkMode, Runtime};
use sandboxd_server::{Isolation, ServerConfig};
use sandboxd_store::SqliteStore;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A command run by `sandboxd run` has no timeout of its own: this is "never".
const NO_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Virtual CPUs (CPU quota) for the sandbox.
    #[arg(long, default_value_t = 1)]
    pub vcpu: u32,
    /// Memory limit in MiB.
    #[arg(long = "memory-mb", default_value_t = 512)]
    pub memory_mb: u32,
    /// Image to start from: `default`, or a stored image; a registry reference that is
    /// not stored yet is pulled first (with the configuration's `insecure_registries`
    /// and the stored registry credentials).
    #[arg(long, default_value = "default")]
    pub image: String,
    /// Data directory (database, layers and sandbox state), shared with the server.
    #[arg(long, env = "SANDBOXD_DATA_DIR", default_value = "./.sandboxd")]
    pub data_dir: PathBuf,
    /// The server's TOML configuration file, for its defaults and limits.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Working directory inside the sandbox (default: the image's `WorkingDir`, else /).
    #[arg(long)]
    pub cwd: Option<String>,
    /// Extra environment variables, KEY=VALUE.
    #[arg(long = "env", short = 'e')]
    pub env: Vec<String>,
    /// Network: `egress` (outbound only, under no policy) or `none` (only loopback)
    /// [default: egress; none on the gVisor tier, which has no egress yet].
    #[arg(long, value_enum)]
    pub network: Option<NetworkArg>,
    /// Isolation tier: `container` or `gvisor` (needs runsc) [default: the default
    /// workspace's (`sandboxd workspace set-isolation`), else the server
    /// configuration's `isolation`, or SANDBOXD_ISOLATION].
    #[arg(long, value_enum)]
    pub isolation: Option<IsolationArg>,
    /// Return only once the sandbox is torn down (by default the run returns as soon
    /// as the command is done, and a detached worker finishes the teardown).
    #[arg(long = "wait-cleanup")]
    pub wait_cleanup: bool,
    /// The command and its arguments; a bare name is looked up in the sandbox's PATH.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `--isolation`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum IsolationArg {
    Container,
    Gvisor,
}

impl From<IsolationArg> for Isolation {
    fn from(arg: IsolationArg) -> Isolation {
        match arg {
            IsolationArg::Container => Isolation::Container,
            IsolationArg::Gvisor => Isolation::Gvisor,
        }
    }
}

/// `--network`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum NetworkArg {
    Egress,
    None,
}

pub fn main(args: RunArgs) -> Result<ExitCode> {
    STARTED.get_or_init(Instant::now);
    // First, while the process has one thread: the caller waits for the command only,
    // and the signals that end the run are noted until its handlers catch them (`Signals`).
    let handoff = match args.wait_cleanup {
        true => {
            crate::run_signals_early::note_from_now(&crate::run_detach::ending_signals())?;
            None
        }
        false => Some(crate::run_detach::split()?),
    };
    // Tests' fault injection points (only in builds with the `failpoints` feature).
    sandboxd_runtime::faults::from_env();
    // The sandbox's init, made now (the process still has one thread) and held
    // until the backend begins it (forked, no exec): its start-up overlaps all that
    // follows.
    // Not for an image to pull or the gVisor tier (dropped, it is ended).
    let held = (args.image == "default" && !matches!(args.isolation, Some(IsolationArg::Gvisor)))
        .then(crate::runtime::hold_init)
        .flatten();
    // A test's pause here: the held init waits while the run is killed.
    let _ = sandboxd_runtime::faults::hit("run.held");
    // Quiet unless asked: `RUST_LOG=sandboxd=debug,sandboxd_runtime=debug` shows the
    // run's phases and each start's, with times since the process started.
    if std::env::var_os("RUST_LOG").is_some() {
        crate::serve::init_logging();
    }
    phase("logging");
    let mut config = ServerConfig::load(args.config.as_deref())?;
    phase("config loaded");
    config.data_dir = args.data_dir.clone();
    if let Some(tier) = args.isolation {
        config.isolation = tier.into();
    }
    // The backend first, and with it the early init (its spawn, id maps and disk take
    // longest), so that they overlap the async runtime, the database and the create. An
    // image to pull waits for the pull: its failure should leave nothing made.
    let tethers = Tethers::new();
    sandboxd_runtime::linux::defer_disk_work();
    let backend = match args.image == "default" {
        true => Some(open_backend_tied(
            &config,
            Tie::OneShot(&tethers, held, &args.image),
        )?),
        false => None,
    };
    // A test's pause here: the early init is being made, no signal is caught yet.
    let _ = sandboxd_runtime::faults::hit("run.opened");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("building the async runtime")?;
    phase("async runtime");
    let code = rt.block_on(run(config, &args, handoff, tethers, backend))?;
    rt.shutdown_timeout(Duration::from_secs(1));
    phase("runtime shut down");
    // What a failed run did not reach (see `defer_disk_work`), then earlier runs' disk
    // images if a thread removes them.
    sandboxd_runtime::linux::finish_deferred_disk_work();
    sandboxd_runtime::linux::wait_for_disk_trash();
    phase("disk trash emptied");
    Ok(ExitCode::from(code))
}

/// When [`main`] began.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Logs (debug) that the run reached `name`, with the time since [`main`] began.
fn phase(name: &str) {
    let ms = STARTED.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3;
    tracing::debug!(phase = name, ms, "run");
}

/// What [`open_engine_over`] opens.
pub(crate) struct Opened {
    pub(crate) engine: Arc<Engine>,
    pub(crate) store: Arc<SqliteStore>,
    /// The container backend.
    pub(crate) linux: Arc<LinuxRuntime>,
    /// Both tiers, as the engine has them.
    pub(crate) tiers: Arc<dyn Runtime>,
}

/// How the opening process ties the sandboxes it starts to itself.
enum Tie<'a> {
    /// Tethered, on both tiers (`with_tethers`: none outlives the process, even killed
    /// with SIGKILL; what is left the next run, build or a server's sweep removes): a
    /// Dockerfile build's RUN sandboxes.
    Tethered(&'a Arc<Tethers>),
    /// Tethered, and one-shot: leaves its sandboxes' disk images for the next process
    /// opening the data dir to remove, rather than wait for that at its exit, and parks
    /// its sandboxes' plain egress networks for the next run (see the runtime's
    /// `with_parked_networks`): `sandboxd run`, of the image named.
    OneShot(&'a Arc<Tethers>, Option<HeldInit>, &'a str),
}

/// The engine over the data directory (as [`open_engine_over`]) whose sandboxes, on both
/// tiers, are tied to this process by `tethers` (see [`Tie::Tethered`]): a Dockerfile
/// build's RUN sandboxes.
pub(crate) fn open_engine_tethered(
    config: &ServerConfig,
    tethers: &Arc<Tethers>,
) -> Result<Opened> {
    open_engine_tied(config, Tie::Tethered(tethers))
}

fn open_engine_tied(config: &ServerConfig, tie: Tie<'_>) -> Result<Opened> {
    let tethers = match tie {
        Tie::Tethered(tethers) | Tie::OneShot(tethers, _, _) => tethers,
    };
    let linux = open_backend_tied(config, tie)?;
    open_engine_over(config, linux, tethers)
}

/// The container backend over the data directory, tied to this process as `tie` says
/// (a one-shot run's begins its early init).
fn open_backend_tied(config: &ServerConfig, tie: Tie<'_>) -> Result<Arc<LinuxRuntime>> {
    let linux = crate::runtime::open_linux(
        &config.data_dir,
        config.resolvers.clone(),
        config.max_ptys_per_sandbox,
    )?;
    phase("backend open");
    let linux = match tie {
        Tie::Tethered(tethers) => linux.with_tethers(tethers.clone()),
        Tie::OneShot(tethers, held, image) => {
            let linux = linux
                .with_deferred_disk_removal()
                .with_parked_networks()
                .with_tethers(tethers.clone());
            // The sandbox's init (spawn, first cgroup move, id maps, disk) is made while
            // the engine opens and the create is recorded; not for the gVisor tier.
            match config.isolation {
                Isolation::Container => {
                    linux.with_early_init(config.limits().disk_mb_per_sandbox, image, held)
                }
                Isolation::Gvisor => linux,
            }
        }
    };
    Ok(Arc::new(linux))
}

/// The engine over the data directory, beside a running server (its store, and `linux`
/// with the gVisor tier opened when a sandbox runs on it), whose sandboxes are tied to
/// this process by `tethers`.
fn open_engine_over(
    config: &ServerConfig,
    linux: Arc<LinuxRuntime>,
    tethers: &Arc<Tethers>,
) -> Result<Opened> {
    let container: Arc<dyn Runtime> = linux.clone();
    // The gVisor tier is opened only when a sandbox runs on it.
    let tiers: Arc<dyn Runtime> = Arc::new(crate::runtime::lazy_tiers(
        container,
        &config.data_dir,
        config.resolvers.clone(),
        config.max_ptys_per_sandbox,
        Some(tethers.clone()),
    ));
    phase("tiers");
    let store = Arc::new(
        SqliteStore::open(config.data_dir.join(DATABASE_FILE))
            .context("opening the sandbox database")?,
    );
    // A run reads little, mostly between its writes: on the writer connection when it
    // is free, rather than on a second one whose opening reads the whole schema again.
    store.read_on_free_writer();
    let engine = Engine::open_beside(EngineConfig {
        data_dir: config.data_dir.clone(),
        runtime: tiers.clone(),
        store: store.clone(),
        limits: config.limits(),
    })
    .context("opening the engine")?;
    phase("store and engine");
    Ok(Opened {
        engine,
        store,
        linux,
        tiers,
    })
}

/// Creates the sandbox, runs the command, hands its status over (when detached), destroys
/// the sandbox and those of dead runs; the exit status byte.
async fn run(
    config: ServerConfig,
    args: &RunArgs,
    handoff: Option<crate::run_detach::HandOff>,
    tethers: Arc<Tethers>,
    backend: Option<Arc<LinuxRuntime>>,
) -> Result<u8> {
    let network = match args.network {
        Some(NetworkArg::Egress) | None => NetworkMode::Egress,
        Some(NetworkArg::None) => NetworkMode::None,
    };
    // From the start: a Ctrl-C or SIGTERM before the command (a pull, the create) ends
    // the run cleanly too, rather than kill the worker with no teardown.
    let mut signals = Signals::new()?;
    phase("signals");
    // Refused before anything is made (the database, a pull) when the data dir's chain
    // is not root's alone (see `private_dir`).
    sandboxd_runtime::linux::private_dir::ensure(&config.data_dir)
        .with_context(|| format!("creating data directory {}", config.data_dir.display()))?;
    if args.image != "default" {
        let store = SqliteStore::open(config.data_dir.join(DATABASE_FILE))
            .context("opening the sandbox database")?;
        tokio::select! {
            pulled = ensure_image(&config, &store, &args.image) => pulled?,
            signo = signals.next() => return Ok(stopped_early(handoff, signo)),
        }
    }
    phase("started");
    let linux = match backend {
        Some(linux) => linux,
        None => open_backend_tied(&config, Tie::OneShot(&tethers, None, &args.image))?,
    };
    let Opened {
        engine,
        store,
        linux,
        tiers,
    } = open_engine_over(&config, linux, &tethers)?;
    engine.accounts().ensure_default_workspace()?;
    phase("engine open");
    let ws = DEFAULT_WORKSPACE.to_owned();
    let request = CreateSandbox {
        name: None,
        resources: Resources {
            vcpu: args.vcpu,
            memory_mb: args.memory_mb,
        },
        image: Some(args.image.clone()),
        snapshot_id: None,
        environment: BTreeMap::new(),
        secrets: Vec::new(),
        metadata: BTreeMap::new(),
        timeout: None,
        auto_pause: false,
        network: Some(network),
        egress: None,
        disk_mb: None,
        aliases: BTreeMap::new(),
        attributes: BTreeMap::new(),
        isolation: args.isolation.map(Isolation::from),
    };
    if let Some(signo) = signals.next().now_or_never() {
        return Ok(stopped_early(handoff, signo));
    }
    // Earlier runs killed before they finished their teardown are swept beside this
    // run's create (on the other CPU; a server's sweeps run beside runs the same way:
    // this run's owner mark is locked, so the sweep never takes its sandbox), and waited
    // for before the command. Their records count against the create's admission
    // (quota, capacity, disk) until the sweep ends them, so a create that fails while
    // the sweep found some is tried once more after it.
    let sweeping = {
        let (engine, store) = (engine.clone(), store.clone());
        let (linux, tiers) = (linux.clone(), tiers.clone());
        tokio::spawn(
            async move { crate::run_orphans::sweep(&engine, &store, &linux, &tiers).await },
        )
    };
    // A signal meanwhile lets the create finish (the engine then knows the sandbox),
    // and the run ends by it once the sandbox is destroyed.
    let mut stopped = None;
    let created = create_noting_signals(&engine, &ws, &request, &mut signals, &mut stopped).await;
    let swept = sweeping.await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "the sweep of killed runs' sandboxes failed");
        0
    });
    if swept > 0 {
        phase("orphans swept");
    }
    let created = match created {
        Err(e) if swept > 0 && stopped.is_none() => {
            tracing::debug!(error = %e, "create refused beside the sweep: trying again");
            create_noting_signals(&engine, &ws, &request, &mut signals, &mut stopped).await
        }
        created => created,
    };
    let (sb, _) = match created {
        Ok(created) => created,
        Err(e) => {
            // The engine undid the start: nothing of this run is left to end.
            tethers.finish_released();
            if let Some(signo) = stopped {
                return Ok(stopped_early(handoff, signo));
            }
            return Err(e).context("starting the sandbox");
        }
    };
    phase("created");
    let outcome = match stopped {
        Some(signo) => Ok(128 + signo as u8),
        None => run_in(&engine, &ws, sb.id, args, &mut signals).await,
    };
    phase("command ended");
    if let (Ok(code), Some(handoff)) = (&outcome, handoff) {
        phase("status handed over");
        handoff.finish(*code);
    }
    // The next run opens the database alone, and reads every frame of its WAL before
    // its first statement: the WAL is kept short here, after the command's status went
    // to the caller (a busy database is left as it is). Before the destroy's writes:
    // the first write into an emptied WAL writes its header anew and syncs it and the
    // dir (0.6-1.2 ms here), which is then this run's tail, not the next run's create.
    let trim = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || store.trim_wal()).await
    };
    match trim {
        Ok(Ok(true)) => phase("database log trimmed"),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "trimming the database's log"),
        Err(e) => tracing::debug!(error = %e, "trimming the database's log"),
    }
    let destroyed = engine
        .destroy(&ws, sb.id)
        .await
        .context("destroying the sandbox");
    linux.discard_early_init();
    phase("destroyed");
    // The next run's spare disk, and the removal of this run's image and earlier ones,
    // while this run still holds its owner mark (what waits for a run's end waits for
    // them too).
    let _ = tokio::task::spawn_blocking(sandboxd_runtime::linux::finish_deferred_disk_work).await;
    phase("disk upkeep done");
    // The parent cgroup this run made, unless another's sandboxes are in it (another
    // process finding it gone makes it again).
    linux.remove_cgroup_parent_if_made();
    // Its owner mark goes once the record is ended too (a failed destroy keeps it
    // locked until this process exits, then for the next sweep).
    tethers.finish_released();
    let code = outcome?;
    destroyed?;
    Ok(code)
}

/// The engine's create of `request`, to its end; the first signal that comes meanwhile
/// is noted in `stopped` (the run ends by it once the sandbox is destroyed).
async fn create_noting_signals(
    engine: &Engine,
    ws: &WorkspaceId,
    request: &CreateSandbox,
    signals: &mut Signals,
    stopped: &mut Option<i32>,
) -> Result<(Sandbox, bool), EngineError> {
    let create = engine.create(ws, request.clone());
    tokio::pin!(create);
    loop {
        tokio::select! {
            created = &mut create => return created,
            signo = signals.next(), if stopped.is_none() => *stopped = Some(signo),
        }
    }
}

/// The status of a run ended by signal `signo` before its sandbox existed: handed over.
fn stopped_early(handoff: Option<crate::run_detach::HandOff>, signo: i32) -> u8 {
    let code = 128 + signo as u8;
    if let Some(handoff) = handoff {
        handoff.finish(code);
    }
    code
}

/// Pulls `image` unless it is stored already.
pub(crate) async fn ensure_image(
    config: &ServerConfig,
    store: &SqliteStore,
    image: &str,
) -> Result<()> {
    let mut images = sandboxd_images::Images::open(&config.data_dir)?;
    images.room.reserve_mb = config.limits().disk_policy.reserve_mb;
    let images = Arc::new(images);
    if images.get(image).is_ok() {
        return Ok(());
    }
    let options = sandboxd_images::PullOptions {
        insecure_registries: config.insecure_registries.clone(),
        credentials: crate::cli_registry::pull_credentials(store)?,
    };
    eprintln!("pulling {image}");
    sandboxd_images::pull::pull(images, image, &options)
        .await
        .with_context(|| format!("image {image:?} is not stored, and pulling it failed"))?;
    Ok(())
}

/// Runs the command through the engine's stream; the exit status byte.
async fn run_in(
    engine: &Arc<Engine>,
    ws: &String,
    id: uuid::Uuid,
    args: &RunArgs,
    signals: &mut Signals,
) -> Result<u8> {
    let mut env = BTreeMap::new();
    for pair in &args.env {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--env {pair:?} is not KEY=VALUE"))?;
        env.insert(k.to_owned(), v.to_owned());
    }
    let mut argv = args.command.clone();
    if !argv[0].starts_with('/') {
        // Resolve a bare name the way a shell would, inside the sandbox.
        let mut lookup = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            "exec \"$0\" \"$@\"".to_owned(),
        ];
        lookup.append(&mut argv);
        argv = lookup;
    }
    let cmd = StreamCommand {
        argv,
        env,
        cwd: args.cwd.clone(),
        timeout: NO_TIMEOUT,
        kill_grace: Duration::from_secs(1),
        // The terminal reads every byte: the command waits for it, nothing drops.
        max_output_bytes: u64::MAX,
        on_cap: OnCap::Discard,
        max_sessions: 1,
    };
    let mut events = engine
        .exec_stream(ws, id, cmd)
        .await
        .context("starting the command")?;
    phase("command started");
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            // Ctrl-C, SIGTERM…: the command is killed with its sandbox, 128+N.
            signo = signals.next() => return Ok(128 + signo as u8),
        };
        let Some(event) = event else { break };
        match event {
            ExecEvent::Output { stream, data } => match stream {
                StreamKind::Stdout => std::io::stdout().write_all(&data)?,
                StreamKind::Stderr => std::io::stderr().write_all(&data)?,
            },
            ExecEvent::Exit(end) => {
                std::io::stdout().flush()?;
                if let Some(ended) = end.sandbox_ended {
                    bail!("the sandbox ended under the command ({ended:?})");
                }
                // The engine's shell convention (128+N for signal N), as a status byte.
                return Ok(end.exit_code as u8);
            }
            ExecEvent::KeyRevoked => bail!("the output stream ended before the command"),
        }
    }
    bail!("the output stream ended before the command exited")
}

/// The signals that end a run (the waiting process forwards them), unless ignored when
/// the run began, and the worker's parent-death signal: they kill the command with its
/// sandbox, torn down as after any command.
struct Signals {
    /// A signal noted before these handlers were installed, reported first.
    early: Option<i32>,
    all: Vec<(i32, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn new() -> Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut all = Vec::new();
        // Not those the caller ignores (`nohup`, `&`): a handler would undo SIG_IGN.
        // The parent-death signal always: the waiting process killed outright.
        let death = crate::run_detach::DEATH;
        for signo in crate::run_detach::honoured().into_iter().chain([death]) {
            let stream = signal(SignalKind::from_raw(signo as i32)).context("catching signals")?;
            // Reported as the SIGTERM it stands for.
            let reported = match signo == death {
                true => nix::sys::signal::Signal::SIGTERM as i32,
                false => signo as i32,
            };
            all.push((reported, stream));
        }
        // Caught now; one that came since the run began was noted (`run_signals_early`).
        let early =
            crate::run_signals_early::take_noted().map(|signo| match signo == death as i32 {
                true => nix::sys::signal::Signal::SIGTERM as i32,
                false => signo,
            });
        Ok(Signals { early, all })
    }

    /// The next signal's number.
    async fn next(&mut self) -> i32 {
        if let Some(signo) = self.early.take() {
            return signo;
        }
        let waits = self.all.iter_mut().map(|(signo, stream)| {
            let signo = *signo;
            Box::pin(async move {
                stream.recv().await;
                signo
            })
        });
        futures_util::future::select_all(waits).await.0
    }
}
