//! `create`: admit (validate, name reuse, capacity), persist PENDING, then start.

use crate::convert::Entry;
use crate::engine::{runtime_error, Engine};
use crate::error::{EngineError, ErrorCode};
use crate::lifecycle::TEARDOWN_FAILED;
use crate::model::{CreateSandbox, EndReason, Sandbox, WorkspaceId};
use crate::state::SandboxStatus;
use crate::validate;
use sandboxd_runtime::{NetworkSpec, Requests, SandboxSpec};
use sandboxd_store::WorkspaceUsage;
use std::collections::BTreeSet;
use time::OffsetDateTime;
use uuid::Uuid;

/// A fork's memory image and the pin that keeps its snapshot from being removed.
type MemoryImage = (std::path::PathBuf, Option<crate::memory_images::Pin>);

/// The image, layers, expiry and disk size a request resolves to.
struct Plan {
    image: String,
    extra_layers: Vec<String>,
    expires_at: Option<OffsetDateTime>,
    disk_mb: u32,
    isolation: sandboxd_runtime::Isolation,
    /// The memory image of the snapshot it starts from, when that keeps memory: the
    /// sandbox starts with the snapshot's processes running (a fork).
    memory_image: Option<std::path::PathBuf>,
}

fn check_request(req: &CreateSandbox) -> Result<(), EngineError> {
    if let Some(name) = &req.name {
        validate::sandbox_name(name)?;
    }
    if req.resources.vcpu < 1 || req.resources.memory_mb < 1 {
        return Err(EngineError::invalid(
            "vcpu and memory_mb must be at least 1",
        ));
    }
    validate::stored_environment(&req.environment)?;
    validate::metadata(&req.metadata)?;
    crate::egress::check_request(req)?;
    if let Some(policy) = &req.egress {
        validate::egress_policy(policy)?;
    }
    validate::secret_names(&req.secrets)
}

/// Same resources, image, snapshot, disk, tier, environment, secrets, autoPause consent
/// and network: a repeated create. A record from before networks were kept matches any.
fn same_config(
    existing: &Entry,
    plan: &Plan,
    req: &CreateSandbox,
    network: &crate::egress::RequestedNetwork,
) -> bool {
    let set = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
    let sb = &existing.sb;
    sb.resources == req.resources
        && sb.image == plan.image
        && sb.disk_mb.is_none_or(|d| d == plan.disk_mb)
        && sb.isolation == plan.isolation
        && sb.snapshot_id == req.snapshot_id
        && sb.environment == req.environment
        && set(&sb.secrets) == set(&req.secrets)
        && sb.auto_pause == req.auto_pause
        && existing.network.as_ref().is_none_or(|n| n == network)
}

impl Engine {
    /// Creates and starts a sandbox; returns it RUNNING with `true`, or an active
    /// sandbox of the same name and configuration with `false`.
    pub async fn create(
        &self,
        ws: &WorkspaceId,
        req: CreateSandbox,
    ) -> Result<(Sandbox, bool), EngineError> {
        self.create_with(ws, req, None).await
    }

    /// [`Engine::create`] with soft guarantees and CPU pinning applied once it started.
    /// Pinning more CPUs than are free of pinned sandboxes is `CapacityExhausted`
    /// (nothing is created); a backend that cannot pin is `Unavailable`.
    pub async fn create_with(
        &self,
        ws: &WorkspaceId,
        req: CreateSandbox,
        requests: Option<Requests>,
    ) -> Result<(Sandbox, bool), EngineError> {
        let t0 = std::time::Instant::now();
        let mut warm = None;
        let created = self.create_steps(ws, req, requests, &mut warm).await;
        self.metrics
            .operation(crate::metrics::Operation::Create, &created);
        // A create that started its sandbox appended its entry with the RUNNING record
        // (`start_steps`); nothing after that write can fail.
        if !matches!(created, Ok((_, true))) {
            let target = created.as_ref().ok().map(|(sb, _)| sb.id.to_string());
            self.audit(ws, "sandbox.create", target, &created);
        }
        if let (Ok(_), Some(warm)) = (&created, warm) {
            self.metrics.create_started(warm, t0.elapsed());
        }
        created
    }

    /// [`Engine::create_with`]'s steps; sets `warm` when it started a sandbox (to
    /// whether the start took a warm init).
    async fn create_steps(
        &self,
        ws: &WorkspaceId,
        req: CreateSandbox,
        requests: Option<Requests>,
        warm: &mut Option<bool>,
    ) -> Result<(Sandbox, bool), EngineError> {
        let t0 = std::time::Instant::now();
        let tm =
            |phase: &str| tracing::debug!(phase, ms = t0.elapsed().as_secs_f64() * 1e3, "create");
        check_request(&req)?;
        crate::egress::check_ceiling(&req, self.limits.default_network)?;
        // What depends on no other create is done before admission, which creates
        // arriving together pass one at a time: the plan (a snapshot's, which a
        // snapshot delete under admission may remove, is made under it) and the disk's
        // room, measured beside the plan (each waits on a blocking thread).
        // A snapshot written meanwhile (its reservation given back) is in a later measure.
        let epoch = self.disk_reservations.epoch();
        let (early, space) = match req.snapshot_id {
            None => {
                // A size the plan refuses is its error; nothing is measured for it.
                let disk_mb = crate::disk::choose(req.disk_mb, None, &self.limits).unwrap_or(0);
                let (plan, space) = tokio::join!(self.plan(ws, &req), self.measure_disk(disk_mb));
                let plan = plan?;
                // The plan chose the same size (`disk::choose`, no snapshot's to inherit).
                debug_assert_eq!(plan.disk_mb, disk_mb);
                (Some(plan), Some(space?))
            }
            Some(_) => (None, None),
        };
        tm("plan made, disk measured");
        // A fork too gets the network its create asks for, under its own workspace's
        // policy: its own link, address and rules (the memory image holds none of them).
        // Read before admission, like the plan: it depends on no other create.
        let network = crate::egress::network_spec(
            self.store.as_ref(),
            ws,
            &req,
            self.limits.default_network,
        )?;
        tm("network read");
        let admission = self.admission.lock().await;
        let plan = match early {
            Some(plan) => plan,
            None => self.plan(ws, &req).await?,
        };
        let space = match space {
            Some(space) if self.disk_reservations.epoch() == epoch => space,
            _ => self.measure_disk(plan.disk_mb).await?,
        };
        tm("planned");
        // Its memory image is read until the restore is done: a delete of the snapshot
        // waits for that (taken under admission, where the delete finds the record). The
        // start holds it, past its deadline too: until the runtime call has returned.
        let restoring = match (&plan.memory_image, req.snapshot_id) {
            (Some(_), Some(snapshot)) => Some(self.memory_pins.pin(snapshot)),
            _ => None,
        };
        // As recorded, and compared for a repeated name, it is the network `network_spec`
        // gives below (a fork's too).
        let requested_network =
            crate::egress::RequestedNetwork::of(&req, self.limits.default_network);
        if let Some(name) = &req.name {
            if let Some(existing) = self.active_named(ws, name).await? {
                return match same_config(&existing, &plan, &req, &requested_network) {
                    true => Ok((existing.sb, false)),
                    false => Err(EngineError::new(
                        ErrorCode::NameTaken,
                        format!(
                            "an active sandbox named {name:?} exists with another configuration"
                        ),
                    )),
                };
            }
        }
        // Summed per workspace by the store: no record of theirs is decoded here.
        let active = self.store.usage_in_status(&crate::state::ACTIVE_STATUSES)?;
        // The client's own limits first: a request that can never fit (400: too big, or
        // pinned on a tier that does not pin) or that is past its workspace's quota
        // (429) is no shortage a retry could wait out (503).
        let pinned = requests.and_then(|r| r.pinned_vcpus);
        if pinned.is_some() {
            self.check_tier_pins(plan.isolation)?;
        }
        self.check_fits(&req)?;
        self.check_quota(&active, ws, &req)?;
        self.check_capacity(&active, &req)?;
        self.check_disk(space, &active, plan.disk_mb, req.disk_mb.is_some())?;
        // The record this create keeps needs room the data dir has beside its reserve
        // (a shortage, after the client's own mistakes above).
        self.admit_db_growth().await?;
        tm("checked");
        if let Some(n) = pinned {
            self.check_pinnable(n).await?;
        }
        self.create_rate.take(ws, self.limits.create_rate)?;
        let mut entry = Entry {
            sb: Sandbox {
                id: Uuid::new_v4(),
                workspace: ws.clone(),
                name: req.name,
                status: SandboxStatus::Pending,
                image: plan.image,
                resources: req.resources,
                created_at: OffsetDateTime::now_utc(),
                started_at: None,
                ended_at: None,
                expires_at: plan.expires_at,
                auto_pause: req.auto_pause,
                auto_paused_at: None,
                end_reason: None,
                error: None,
                snapshot_id: req.snapshot_id,
                environment: req.environment,
                secrets: req.secrets,
                metadata: req.metadata,
                disk_mb: Some(plan.disk_mb),
                aliases: req.aliases,
                attributes: req.attributes,
                isolation: plan.isolation,
            },
            handle: None,
            extra_layers: plan.extra_layers,
            network: Some(requested_network),
        };
        // Held from before the record exists: a PENDING or STARTING record whose lock
        // is free is one no create works on any more (see `lifecycle::stuck`).
        let _guard = self.locks.get(entry.sb.id).write_owned().await;
        // A one-shot run's owner mark, before the record: killed from here on, the run
        // leaves a mark the next sweep ends the record by.
        let id = entry.sb.id;
        self.runtime
            .claim(id)
            .map_err(|e| runtime_error("cannot mark the sandbox's owner", e))?;
        let inserted = crate::faults::store_write("store.insert_sandbox").and_then(|()| {
            self.store
                .insert_sandbox(&crate::convert::entry_to_record(&entry))
                .map_err(EngineError::from)
        });
        if let Err(e) = inserted {
            self.runtime.unclaim(id);
            return Err(e);
        }
        tm("inserted");
        // A pinned start claims its CPUs under admission, so that the next pinned create
        // sees them taken.
        let pinning = requests.is_some_and(|r| r.pinned_vcpus.is_some());
        let admission = pinning.then_some(admission);
        let memory = plan.memory_image.map(|image| (image, restoring));
        // Once started, the sandbox is RUNNING on record with its create's audit entry:
        // nothing below may fail.
        if let Err(e) = self.start(&mut entry, network, requests, memory).await {
            // The claim goes with a start that made nothing and whose record is ended.
            let ended = self
                .store
                .get_sandbox(id)
                .is_ok_and(|r| r.is_some_and(|r| r.status == SandboxStatus::Failed.as_str()));
            if ended && entry.handle.is_none() {
                self.runtime.unclaim(id);
            }
            return Err(e);
        }
        *warm = entry.handle.as_ref().map(|h| h.warm);
        // Its idle time (autoPause) starts now, not when the server started.
        self.activity.touch(entry.sb.id);
        tm("running");
        drop(admission);
        Ok((entry.sb, true))
    }

    /// Resolves image, snapshot layers, expiry and disk size, and checks the secrets
    /// exist.
    async fn plan(&self, ws: &str, req: &CreateSandbox) -> Result<Plan, EngineError> {
        for name in &req.secrets {
            if self.store.get_secret(ws, name)?.is_none() {
                return Err(EngineError::new(
                    ErrorCode::SecretNotFound,
                    format!("secret {name:?} not found"),
                ));
            }
        }
        let (image, extra_layers, inherited_disk, memory_image) = match req.snapshot_id {
            Some(id) => {
                let snap = self.get_snapshot(&ws.to_owned(), id).await?;
                if req.image.as_ref().is_some_and(|i| *i != snap.image) {
                    return Err(EngineError::invalid(
                        "image differs from the snapshot's image",
                    ));
                }
                (snap.image, snap.layers, snap.disk_mb, snap.memory_image)
            }
            None => (
                req.image.clone().unwrap_or_else(|| "default".into()),
                Vec::new(),
                None,
                None,
            ),
        };
        let disk_mb = crate::disk::choose(req.disk_mb, inherited_disk, &self.limits)?;
        // A tier this server cannot run is refused before anything is recorded.
        // A fork runs on the tier its memory image was taken on (gVisor).
        let isolation = match (&memory_image, req.isolation) {
            (Some(_), Some(sandboxd_runtime::Isolation::Container)) => {
                return Err(EngineError::invalid(
                    "the snapshot keeps memory (gVisor): its sandboxes run on the gvisor tier",
                ))
            }
            (Some(_), _) => sandboxd_runtime::Isolation::Gvisor,
            (None, requested) => self.isolation_for(&ws.to_owned(), requested)?,
        };
        self.check_tier(isolation)?;
        let name = image.clone();
        let resolved = self
            .blocking(move |rt| rt.resolve_image(&name))
            .await?
            .map_err(|e| runtime_error("cannot resolve the image", e))?;
        // An image user that does not resolve is refused now, not at the first command.
        if let Some(spec) = resolved.config.user.clone() {
            let mut layers = resolved.layers;
            layers.extend(extra_layers.iter().cloned());
            self.blocking(move |rt| crate::ops::user_in_layers(rt, &layers, &spec))
                .await??;
        }
        let expires_at = match req.timeout {
            None => None,
            Some(t) => Some(
                time::Duration::try_from(t)
                    .ok()
                    .and_then(|t| OffsetDateTime::now_utc().checked_add(t))
                    .ok_or_else(|| EngineError::invalid("timeout is too long"))?,
            ),
        };
        Ok(Plan {
            image,
            extra_layers,
            expires_at,
            disk_mb,
            isolation,
            memory_image,
        })
    }

    /// The active sandbox of `ws` named `name`, if any (expired ones are ended first).
    async fn active_named(&self, ws: &str, name: &str) -> Result<Option<Entry>, EngineError> {
        for rec in self.store.sandboxes_named(ws, name)? {
            let id = rec.id;
            // One left mid-transition by a failed create is no sandbox to hand back.
            self.settle_if_stuck(ws, id).await?;
            // Tests hold a named create here, under admission (no hop in production).
            if cfg!(feature = "failpoints") {
                self.blocking(|_| sandboxd_runtime::faults::hit("create.named"))
                    .await?;
            }
            // Under `admission`: never waits for the sandbox's lock (lock order).
            self.expire_if_due_under_admission(ws, id).await?;
            let e = self.load(ws, id)?;
            if e.sb.status.is_active() {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// A request that would not fit an empty server is the client's mistake, not a
    /// shortage to wait out.
    fn check_fits(&self, req: &CreateSandbox) -> Result<(), EngineError> {
        let l = self.limits;
        let (want_vcpu, want_memory) = (req.resources.vcpu, req.resources.memory_mb);
        if want_vcpu > l.max_vcpu_total || u64::from(want_memory) > l.max_memory_mb_total {
            return Err(EngineError::invalid(format!(
                "{want_vcpu} vCPUs and {want_memory} MiB can never fit this server: it runs \
                 at most {} vCPUs and {} MiB of sandboxes in all",
                l.max_vcpu_total, l.max_memory_mb_total
            )));
        }
        Ok(())
    }

    /// The server's limits, counting the `active` sandboxes.
    fn check_capacity(
        &self,
        active: &[WorkspaceUsage],
        req: &CreateSandbox,
    ) -> Result<(), EngineError> {
        let l = self.limits;
        let vcpu: u64 = active.iter().map(|u| u.vcpu).sum();
        let memory: u64 = active.iter().map(|u| u.memory_mb).sum();
        let count: u64 = active.iter().map(|u| u.sandboxes).sum();
        let full = count + 1 > u64::from(l.max_sandboxes)
            || vcpu + u64::from(req.resources.vcpu) > u64::from(l.max_vcpu_total)
            || memory + u64::from(req.resources.memory_mb) > l.max_memory_mb_total;
        match full {
            true => Err(EngineError::new(
                ErrorCode::CapacityExhausted,
                "the server has no capacity for this sandbox",
            )),
            false => Ok(()),
        }
    }

    /// The workspace's quota, counting its `active` sandboxes.
    fn check_quota(
        &self,
        active: &[WorkspaceUsage],
        ws: &str,
        req: &CreateSandbox,
    ) -> Result<(), EngineError> {
        let mut used = crate::quota::Usage::default();
        for u in active.iter().filter(|u| u.workspace == ws) {
            used.sandboxes += u.sandboxes;
            used.vcpu += u.vcpu;
            used.memory_mb += u.memory_mb;
        }
        let over = self.store.get_quota_override(ws)?;
        let quota = self.limits.workspace_quota.with_override(over.as_ref());
        crate::quota::check(&quota, used, req.resources.vcpu, req.resources.memory_mb)
    }

    /// Pinning on tier `isolation`: a tier that never pins is the client's mistake
    /// (400: the gVisor tier's sentry keeps its own vCPUs, see the README).
    fn check_tier_pins(&self, isolation: sandboxd_runtime::Isolation) -> Result<(), EngineError> {
        match isolation == sandboxd_runtime::Isolation::Container || self.runtime.can_pin(isolation)
        {
            true => Ok(()),
            false => Err(EngineError::invalid(format!(
                "CPU pinning (dedicated CPUs) is not offered on the {isolation} tier; ask \
                 for shared placement or the container tier"
            ))),
        }
    }

    /// Pinning `n` CPUs: a host without the cpuset controller or free CPUs is a shortage.
    async fn check_pinnable(&self, n: u32) -> Result<(), EngineError> {
        match self.blocking(|rt| rt.free_cpus()).await? {
            None => Err(EngineError::new(
                ErrorCode::Unavailable,
                "this backend cannot pin CPUs",
            )),
            Some(free) if free.len() < n as usize => Err(EngineError::new(
                ErrorCode::CapacityExhausted,
                format!(
                    "{n} CPUs to pin but {} are free of pinned sandboxes",
                    free.len()
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// PENDING → STARTING → (runtime start, requests applied) → RUNNING. On any
    /// failure (the backend's, a store write's, the start deadline) nothing of the
    /// sandbox is left on the host and its record is FAILED (`start_failed`), or, when
    /// even that write fails, left for `lifecycle::stuck` to settle. A fork's memory
    /// image comes with the pin of its snapshot, released once the runtime's start has
    /// returned (past the deadline, the restore goes on in the background and still
    /// reads the image).
    async fn start(
        &self,
        e: &mut Entry,
        network: NetworkSpec,
        requests: Option<Requests>,
        memory_image: Option<MemoryImage>,
    ) -> Result<(), EngineError> {
        let started = self.start_steps(e, network, requests, memory_image).await;
        if let Err(err) = &started {
            self.abandon_start(e, err).await;
        }
        started
    }

    async fn start_steps(
        &self,
        e: &mut Entry,
        network: NetworkSpec,
        requests: Option<Requests>,
        memory_image: Option<MemoryImage>,
    ) -> Result<(), EngineError> {
        self.transition(e, SandboxStatus::Starting)?;
        tracing::debug!(id = %e.sb.id, "create: starting persisted");
        let spec = SandboxSpec {
            id: e.sb.id,
            image: e.sb.image.clone(),
            extra_layers: e.extra_layers.clone(),
            hostname: e.sb.name.clone().unwrap_or_else(|| "sandbox".into()),
            vcpu: e.sb.resources.vcpu,
            memory_mb: e.sb.resources.memory_mb,
            pids_max: self.limits.pids_per_sandbox,
            disk_mb: e.sb.disk_mb.unwrap_or(self.limits.disk_mb_per_sandbox),
            isolation: e.sb.isolation,
        };
        let limit = self.limits.deadlines.start;
        let started = self
            .bounded(
                limit,
                move |rt| {
                    let handle = match memory_image {
                        Some((image, _restoring)) => {
                            rt.start_from_memory(&spec, &network, &image)?
                        }
                        None => rt.start_with_network(&spec, &network)?,
                    };
                    let Some(req) = requests else {
                        return Ok(handle);
                    };
                    match rt.apply_requests(&handle, &req) {
                        Ok(_) => Ok(handle),
                        Err(err) => {
                            let _ = rt.destroy(&handle);
                            Err(err)
                        }
                    }
                },
                // A start that finished past its deadline: its sandbox is FAILED already.
                |rt, started| {
                    if let Ok(handle) = started {
                        if let Err(err) = rt.destroy(&handle) {
                            tracing::error!(sandbox = %handle.id, error = %err, "cannot remove a start that missed its deadline");
                        }
                    }
                },
            )
            .await?
            .ok_or_else(|| {
                super::deadline::overdue(&format!("the start of sandbox {}", e.sb.id), limit)
            })?;
        tracing::debug!(id = %e.sb.id, "create: runtime returned");
        let handle = started
            .map_err(|err| runtime_error(&format!("sandbox {} failed to start", e.sb.id), err))?;
        // Its first command's connection, opened while the record is written and the
        // create answered (the command then pays no connect and handshake).
        let client = sandboxd_agent_protocol::AgentClient::new(&handle.agent_socket);
        tokio::spawn(async move { client.preconnect().await });
        e.handle = Some(handle);
        e.sb.started_at = Some(OffsetDateTime::now_utc());
        // The create's audit entry goes with the RUNNING record: one write before the
        // answer, not two. A failed write fails the start, and `create_with` appends
        // the entry with that error instead.
        let audit = crate::audit::audit_record(
            &e.sb.workspace,
            "sandbox.create",
            Some(e.sb.id.to_string()),
            "ok",
        );
        self.transition_audited(e, SandboxStatus::Running, &audit)?;
        if let Some(h) = &e.handle {
            self.watch_agent(&e.sb.workspace, e.sb.id, h);
        }
        Ok(())
    }

    /// After a failed start: removes what the backend made, then FAILED with the error.
    pub(super) async fn abandon_start(&self, e: &mut Entry, err: &EngineError) {
        e.sb.error = Some(err.message.clone());
        match self.tear_down(e).await {
            Ok(Ok(())) => e.handle = None,
            Ok(Err(teardown)) => {
                // Kept with its handle: a later destroy tries the teardown again.
                tracing::error!(sandbox = %e.sb.id, error = %teardown, "cannot remove a failed start");
                e.sb.error = Some(format!(
                    "{TEARDOWN_FAILED}{teardown} (after: {})",
                    err.message
                ));
            }
            Err(teardown) => {
                tracing::error!(sandbox = %e.sb.id, error = %teardown, "cannot remove a failed start");
            }
        }
        e.sb.end_reason = Some(EndReason::StartFailed);
        e.sb.ended_at = Some(OffsetDateTime::now_utc());
        // The in-memory status may be one whose write failed: FAILED is reachable from
        // each status a start passes through.
        if let Err(save) = self.transition(e, SandboxStatus::Failed) {
            tracing::warn!(sandbox = %e.sb.id, error = %save, "cannot record a failed start; it is settled later");
        }
    }
}
