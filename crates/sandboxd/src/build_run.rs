//! One Dockerfile RUN step: a sandbox of the state so far (a temporary image record
//! over its layers), created, run and snapshotted through the engine with the server's
//! isolation, limits and egress policy; its writable layer becomes the step's layer.
//! The sandbox and the temporary record are gone afterwards, whatever happened.

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use sandboxd_engine::{
    CreateSandbox, Engine, ExecEvent, OnCap, Resources, StreamCommand, StreamKind,
};
use sandboxd_images::build_cache::BuildState;
use sandboxd_images::Images;
use sandboxd_runtime::linux::images as rt_images;
use sandboxd_runtime::ImageLayers;
use sandboxd_store::{SqliteStore, Store};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

/// What a RUN step runs with.
pub struct RunStep<'a> {
    pub engine: &'a Arc<Engine>,
    pub store: &'a Arc<SqliteStore>,
    pub images: &'a Images,
    pub ws: &'a String,
    pub resources: Resources,
    pub disk_mb: Option<u32>,
    pub timeout: Duration,
    /// Turns true at SIGINT: the step ends, its sandbox is destroyed.
    pub interrupted: tokio::sync::watch::Receiver<bool>,
}

/// How much longer than a step its sandbox may live: if the build dies, the server's
/// expiry ends the sandbox by then.
const SANDBOX_MARGIN: Duration = Duration::from_secs(300);

impl RunStep<'_> {
    /// Runs `argv` (with `extra` variables over the image's environment) on `state`;
    /// the digest of the layer it wrote, `None` when it wrote nothing.
    pub async fn run(
        &self,
        state: &BuildState,
        argv: Vec<String>,
        extra: &BTreeMap<String, String>,
    ) -> Result<Option<String>> {
        let name = format!("sandboxd-build-{}", uuid::Uuid::new_v4().simple());
        let record = ImageLayers {
            name: name.clone(),
            layers: state.layers.clone(),
            config: state.config.clone(),
            host_usr: state.host_usr,
        };
        let data_dir = self.images.data_dir();
        rt_images::store_image(data_dir, self.images.layer_store(), &record)
            .context("recording the step's image")?;
        let result = self.in_sandbox(&name, argv, extra).await;
        if let Err(e) = rt_images::remove_image(data_dir, self.images.layer_store(), &name) {
            tracing::warn!(image = %name, error = %e, "cannot remove a build step's image");
        }
        result
    }

    async fn in_sandbox(
        &self,
        image: &str,
        argv: Vec<String>,
        extra: &BTreeMap<String, String>,
    ) -> Result<Option<String>> {
        let request = CreateSandbox {
            name: None,
            resources: self.resources,
            image: Some(image.to_owned()),
            snapshot_id: None,
            environment: BTreeMap::new(),
            secrets: Vec::new(),
            metadata: BTreeMap::new(),
            timeout: Some(self.timeout + SANDBOX_MARGIN),
            auto_pause: false,
            network: None,
            egress: None,
            disk_mb: self.disk_mb,
            aliases: BTreeMap::new(),
            attributes: BTreeMap::new(),
            isolation: None,
        };
        let (sb, _) = self
            .engine
            .create(self.ws, request)
            .await
            .context("starting the step's sandbox")?;
        let result = self.exec_and_capture(sb.id, argv, extra).await;
        if let Err(e) = self.engine.destroy(self.ws, sb.id).await {
            // The step's outcome is reported; the server's reconcile ends a leftover.
            eprintln!("sandboxd: cannot destroy build sandbox {}: {e}", sb.id);
        }
        result
    }

    async fn exec_and_capture(
        &self,
        id: uuid::Uuid,
        argv: Vec<String>,
        extra: &BTreeMap<String, String>,
    ) -> Result<Option<String>> {
        // Over the image's environment (the engine adds it).
        let cmd = StreamCommand {
            argv,
            env: extra.clone(),
            cwd: None, // the image's WorkingDir
            timeout: self.timeout,
            kill_grace: Duration::from_secs(1),
            max_output_bytes: u64::MAX,
            on_cap: OnCap::Discard,
            max_sessions: 1,
        };
        let mut events = self
            .engine
            .exec_stream(self.ws, id, cmd)
            .await
            .context("starting the step's command")?;
        let mut code = None;
        let mut interrupted = self.interrupted.clone();
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                _ = interrupted.wait_for(|v| *v) => bail!("interrupted"),
            };
            let Some(event) = event else { break };
            match event {
                ExecEvent::Output { stream, data } => match stream {
                    StreamKind::Stdout => {
                        let mut out = std::io::stdout().lock();
                        out.write_all(&data)?;
                        out.flush()?;
                    }
                    StreamKind::Stderr => std::io::stderr().write_all(&data)?,
                },
                ExecEvent::Exit(end) => {
                    if let Some(ended) = end.sandbox_ended {
                        bail!("the sandbox ended under the step ({ended:?})");
                    }
                    code = Some(end.exit_code);
                    break;
                }
                ExecEvent::KeyRevoked => bail!("the step's output ended before it did"),
            }
        }
        match code {
            Some(0) => {}
            Some(c) => bail!("exited with code {c}"),
            None => bail!("the step's output ended before it exited"),
        }
        let snap = self
            .engine
            .snapshot(self.ws, id, None)
            .await
            .context("committing the step's layer")?;
        // The layer is the step's, not a snapshot's: the build cache and the built
        // image will name it.
        self.store
            .delete_snapshot(snap.id)
            .context("dropping the step's snapshot record")?;
        let dir = self.images.layer_store().path(&snap.digest)?;
        let empty = std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        Ok((!empty).then_some(snap.digest))
    }
}
