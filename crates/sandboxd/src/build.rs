//! `sandboxd templates build NAME --file Dockerfile`: a Dockerfile built into a stored
//! image (the template), step by step. RUN steps run in sandboxes through the engine
//! (see `build_run`); COPY/ADD and WORKDIR make their layers from the build context
//! directly; ENV, LABEL, USER, CMD and ENTRYPOINT change the configuration. Every step
//! is cached (`build_cache`), so an unchanged rebuild runs nothing and stores no new
//! layer. The image is recorded only when every step succeeded.

use crate::build_run::RunStep;
use anyhow::{anyhow, bail, Context, Result};
use sandboxd_engine::{Engine, Resources, DEFAULT_WORKSPACE};
use sandboxd_images::build_cache::{BuildCache, BuildState};
use sandboxd_images::build_context::{self as bctx, Chain, Context as BuildContext};
use sandboxd_images::dockerfile::{self, Command, Instruction, Kind};
use sandboxd_images::Images;
use sandboxd_runtime::linux::images as rt_images;
use sandboxd_runtime::linux::layers::{digest_tree, remove_tree};
use sandboxd_runtime::ImageLayers;
use sandboxd_server::ServerConfig;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long one RUN step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(3600);

/// What `templates build --file` was asked.
pub struct DockerfileBuild {
    pub name: String,
    pub file: PathBuf,
    pub context: Option<PathBuf>,
    pub build_args: Vec<String>,
    pub cpu: Option<u32>,
    pub memory_mib: Option<u32>,
    pub disk_mb: Option<u32>,
    pub data_dir: PathBuf,
    pub config: Option<PathBuf>,
}

pub fn main(args: DockerfileBuild) -> Result<()> {
    let mut config = ServerConfig::load(args.config.as_deref())?;
    config.data_dir = args.data_dir.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("building the async runtime")?;
    let result = rt.block_on(build(config, args));
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Names a built template may have: those of workspace templates, and never a built-in's.
fn check_name(name: &str) -> Result<()> {
    let ok = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !ok {
        bail!("template name {name:?}: 1-63 of a-z, 0-9, `-`, `_`");
    }
    if sandboxd_engine::BUILTIN_TEMPLATES
        .iter()
        .any(|(n, _, _)| *n == name)
    {
        bail!("template {name:?} is built in");
    }
    Ok(())
}

struct Builder {
    engine: Arc<Engine>,
    store: Arc<sandboxd_store::SqliteStore>,
    images: Images,
    cache: BuildCache,
    config: ServerConfig,
    ws: String,
    context: BuildContext,
    resources: Resources,
    disk_mb: Option<u32>,
    /// True once SIGINT came: the build stops at the next step or inside a RUN.
    interrupted: tokio::sync::watch::Receiver<bool>,
}

async fn build(config: ServerConfig, args: DockerfileBuild) -> Result<()> {
    check_name(&args.name)?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let steps = dockerfile::parse(&text)?;
    let context_dir = args
        .context
        .clone()
        .or_else(|| args.file.parent().map(PathBuf::from))
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."));
    let context = BuildContext::open(&context_dir)?;
    let mut build_args = BTreeMap::new();
    for pair in &args.build_args {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--build-arg {pair:?} is not KEY=VALUE"))?;
        build_args.insert(k.to_owned(), v.to_owned());
    }
    // Tethered: a build killed outright (SIGKILL) takes its RUN sandbox with it; what
    // is left of it (mounts, disk, cgroups, record) the next build or a server's sweep
    // removes. SIGINT is handled below (the step's sandbox is destroyed).
    let tethers = sandboxd_runtime::linux::Tethers::new();
    let crate::run::Opened {
        engine,
        store,
        linux,
        tiers,
    } = crate::run::open_engine_tethered(&config, &tethers)?;
    engine.accounts().ensure_default_workspace()?;
    crate::run_orphans::sweep(&engine, &store, &linux, &tiers).await;
    let mut images = Images::open(&config.data_dir)?;
    images.room.reserve_mb = config.limits().disk_policy.reserve_mb;
    let (tx, interrupted) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("sandboxd: interrupted; cleaning up");
            let _ = tx.send(true);
        }
    });
    let b = Builder {
        interrupted,
        engine,
        store,
        cache: BuildCache::new(&config.data_dir),
        images,
        config,
        ws: DEFAULT_WORKSPACE.to_owned(),
        context,
        resources: Resources {
            vcpu: args.cpu.unwrap_or(1),
            memory_mb: args.memory_mib.unwrap_or(1024),
        },
        disk_mb: args.disk_mb,
    };
    let built = b.steps(&steps, &build_args).await;
    // The step sandboxes' owner marks go once their records are ended (a failed destroy
    // keeps its mark locked until this process exits, then for the next sweep).
    tethers.finish_released();
    b.save(&args.name, built?)
}

/// Variables while building: build args in scope, then ENV on top.
struct Vars<'a> {
    args: BTreeMap<String, String>,
    given: &'a BTreeMap<String, String>,
    /// Every ARG name declared (before or after FROM).
    declared: std::collections::BTreeSet<String>,
}

impl Vars<'_> {
    fn lookup(&self, state: &BuildState, name: &str) -> Option<String> {
        state
            .config
            .env_pairs()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_owned())
            .or_else(|| self.args.get(name).cloned())
    }

    fn expand(&self, state: &BuildState, line: usize, text: &str) -> Result<String> {
        Ok(dockerfile::expand(line, text, &|n| self.lookup(state, n))?)
    }
}

impl Builder {
    async fn steps(
        &self,
        steps: &[Instruction],
        given: &BTreeMap<String, String>,
    ) -> Result<BuildState> {
        let total = steps.len();
        let mut vars = Vars {
            args: BTreeMap::new(),
            given,
            declared: Default::default(),
        };
        let mut state = BuildState::default();
        let mut stdout = std::io::stdout();
        for (n, step) in steps.iter().enumerate() {
            if *self.interrupted.borrow() {
                bail!("interrupted");
            }
            writeln!(
                stdout,
                "Step {}/{total} (line {}) : {}",
                n + 1,
                step.line,
                step.text
            )?;
            stdout.flush()?;
            let fail = |e: anyhow::Error| {
                anyhow!(
                    "step {}/{total} (Dockerfile line {}) {}: {e:#}",
                    n + 1,
                    step.line,
                    step.text
                )
            };
            state = self.step(step, state, &mut vars).await.map_err(fail)?;
        }
        for k in given.keys() {
            if !vars.declared.contains(k) {
                eprintln!("warning: build argument {k} is not declared by an ARG");
            }
        }
        Ok(state)
    }

    async fn step(
        &self,
        step: &Instruction,
        mut state: BuildState,
        vars: &mut Vars<'_>,
    ) -> Result<BuildState> {
        let line = step.line;
        match &step.kind {
            Kind::Arg(name, default) => {
                let value = match (vars.given.get(name), default) {
                    (Some(v), _) => Some(v.clone()),
                    (None, Some(d)) => Some(vars.expand(&state, line, d)?),
                    (None, None) => None,
                };
                vars.declared.insert(name.clone());
                match value {
                    Some(v) => vars.args.insert(name.clone(), v),
                    None => vars.args.remove(name),
                };
            }
            Kind::From(image) => {
                let image = vars.expand(&state, line, image)?;
                state = self.base(&image).await?;
                // Args declared before FROM are for FROM only.
                vars.args.clear();
            }
            Kind::Env(pairs) => {
                for (k, v) in pairs {
                    let v = vars.expand(&state, line, v)?;
                    state
                        .config
                        .env
                        .retain(|e| e.split_once('=').map(|p| p.0) != Some(k));
                    state.config.env.push(format!("{k}={v}"));
                }
            }
            Kind::Label(pairs) => {
                for (k, v) in pairs {
                    let k = vars.expand(&state, line, k)?;
                    let v = vars.expand(&state, line, v)?;
                    state.config.labels.insert(k, v);
                }
            }
            Kind::User(user) => state.config.user = Some(vars.expand(&state, line, user)?),
            Kind::Cmd(c) => state.config.cmd = argv(c),
            Kind::Entrypoint(c) => state.config.entrypoint = argv(c),
            Kind::Workdir(dir) => {
                let dir = vars.expand(&state, line, dir)?;
                let cwd = state
                    .config
                    .working_dir
                    .clone()
                    .unwrap_or_else(|| "/".into());
                let abs = format!("/{}", bctx::image_path(&cwd, &dir).display());
                self.layer_step(&mut state, &format!("WORKDIR {abs}"), |chain, scratch| {
                    Ok(bctx::workdir_layer(chain, &abs, scratch)?)
                })?;
                state.config.working_dir = Some(abs);
            }
            Kind::Copy(spec) | Kind::Add(spec) => {
                let what = match step.kind {
                    Kind::Copy(_) => "COPY",
                    _ => "ADD",
                };
                let mut spec = spec.clone();
                for s in &mut spec.sources {
                    *s = vars.expand(&state, line, s)?;
                }
                spec.dest = vars.expand(&state, line, &spec.dest)?;
                let cwd = state
                    .config
                    .working_dir
                    .clone()
                    .unwrap_or_else(|| "/".into());
                let text = format!("{what} {spec:?} in {cwd}");
                // What it copies takes the data dir's room as a pull's layers do.
                let mut budget = self.images.image_budget()?;
                self.layer_step(&mut state, &text, |chain, scratch| {
                    bctx::copy_layer(
                        &self.context,
                        chain,
                        what,
                        &spec,
                        &cwd,
                        scratch,
                        &mut budget,
                    )?;
                    Ok(true)
                })?;
            }
            Kind::Run(c) => {
                let argv = argv(c);
                let extra: BTreeMap<String, String> = vars
                    .args
                    .iter()
                    .filter(|(k, _)| !state.config.env_pairs().any(|(e, _)| e == k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let key = state.key(&[
                    "RUN",
                    &serde_json::to_string(&argv)?,
                    &serde_json::to_string(&extra)?,
                ]);
                if let Some(hit) = self.cache.get(&key, self.images.layer_store()) {
                    println!(" ---> cached");
                    return Ok(hit);
                }
                let run = RunStep {
                    engine: &self.engine,
                    store: &self.store,
                    images: &self.images,
                    ws: &self.ws,
                    resources: self.resources,
                    disk_mb: self.disk_mb,
                    timeout: STEP_TIMEOUT,
                    interrupted: self.interrupted.clone(),
                };
                if let Some(layer) = run.run(&state, argv, &extra).await? {
                    state.push_layer(&layer);
                }
                self.cache
                    .put(&key, &state)
                    .context("recording the build cache")?;
                println!(" ---> ran");
            }
        }
        Ok(state)
    }

    /// A step that writes a layer with `make` into scratch (returning whether it made
    /// anything); cached by the parent state, `text` and the scratch's digest.
    fn layer_step(
        &self,
        state: &mut BuildState,
        text: &str,
        make: impl FnOnce(&Chain, &std::path::Path) -> Result<bool>,
    ) -> Result<()> {
        let dirs: Vec<PathBuf> = state
            .layers
            .iter()
            .rev()
            .map(|d| self.images.layer_store().path(d))
            .collect::<Result<_, _>>()?;
        let chain = Chain { layers: &dirs };
        let scratch = self.images.scratch_dir()?;
        let made = match make(&chain, &scratch) {
            Ok(m) => m,
            Err(e) => {
                remove_tree(&scratch);
                return Err(e);
            }
        };
        if !made {
            remove_tree(&scratch);
            println!(" ---> no layer");
            return Ok(());
        }
        let digest = match digest_tree(&scratch) {
            Ok((d, _)) => d,
            Err(e) => {
                remove_tree(&scratch);
                return Err(e.into());
            }
        };
        let key = state.key(&[text, &digest]);
        if let Some(hit) = self.cache.get(&key, self.images.layer_store()) {
            remove_tree(&scratch);
            println!(" ---> cached");
            *state = hit;
            return Ok(());
        }
        let layer = self.images.layer_store().commit(&scratch)?;
        state.push_layer(&layer.digest);
        self.cache
            .put(&key, state)
            .context("recording the build cache")?;
        println!(" ---> layer {}", &layer.digest[..12]);
        Ok(())
    }

    /// The state FROM `name` starts with: `default`, a stored image (a built template
    /// is one), a workspace template, or a registry reference pulled now.
    async fn base(&self, name: &str) -> Result<BuildState> {
        if let Ok(image) = self.images.get(name) {
            return Ok(state_of(image));
        }
        if let Ok(t) = self.engine.get_template(&self.ws, name).await {
            match t.snapshot_id {
                Some(id) => {
                    let snap = self.engine.get_snapshot(&self.ws, id).await?;
                    let mut state = state_of(self.images.get(&snap.image)?);
                    for l in &snap.layers {
                        state.push_layer(l);
                    }
                    return Ok(state);
                }
                None => {
                    let image = t.image.unwrap_or_else(|| "default".into());
                    return Ok(state_of(self.images.get(&image)?));
                }
            }
        }
        let store = sandboxd_store::SqliteStore::open(
            self.config.data_dir.join(crate::serve::DATABASE_FILE),
        )?;
        crate::run::ensure_image(&self.config, &store, name)
            .await
            .context("not a template or a stored image")?;
        Ok(state_of(self.images.get(name)?))
    }

    /// Records the result as image `name` (with the mount-point layer on top).
    fn save(&self, name: &str, mut state: BuildState) -> Result<()> {
        let top = self.images.mount_point_layer()?;
        state.push_layer(&top);
        let image = ImageLayers {
            name: name.to_owned(),
            layers: state.layers,
            config: state.config,
            host_usr: state.host_usr,
        };
        rt_images::store_image(self.images.data_dir(), self.images.layer_store(), &image)
            .with_context(|| format!("storing template {name}"))?;
        println!("built template {name} ({} layers)", image.layers.len());
        Ok(())
    }
}

fn state_of(image: ImageLayers) -> BuildState {
    BuildState {
        host_usr: image.host_usr || image.name == sandboxd_runtime::linux::DEFAULT_IMAGE,
        layers: image.layers,
        config: image.config,
    }
}

fn argv(c: &Command) -> Vec<String> {
    match c {
        Command::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
        Command::Exec(v) => v.clone(),
    }
}
