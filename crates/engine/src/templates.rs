//! Templates: named images a sandbox starts from. Two are built in (`default` and
//! `python`, both on the built-in image, which carries the host's python3); a workspace
//! builds its own by running steps in a sandbox and snapshotting it, so a workspace
//! template is a snapshot named `template:NAME` (its layers are kept as long as it is).
//! A name that is neither is looked up among the stored OCI images (`sandboxd images
//! pull`), so a template may name an image.

use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::{CreateSandbox, ExecCommand, PageRequest, Resources, WorkspaceId};
use crate::validate;
use std::collections::BTreeMap;
use std::time::Duration;
use time::OffsetDateTime;
use uuid::Uuid;

/// Name prefix of the snapshots that hold workspace templates.
pub const TEMPLATE_SNAPSHOT_PREFIX: &str = "template:";

/// The built-in templates: name, description, default (and maximum) resources.
pub const BUILTIN_TEMPLATES: [(&str, &str, Resources); 2] = [
    (
        "default",
        "Debian userland from the host, read-only /usr",
        Resources {
            vcpu: 2,
            memory_mb: 1024,
        },
    ),
    (
        "python",
        "The default image with its python3, more memory",
        Resources {
            vcpu: 2,
            memory_mb: 2048,
        },
    ),
];

/// A template a sandbox can be created from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub name: String,
    pub description: String,
    pub builtin: bool,
    /// Default resources, also the most a sandbox of this template may ask for.
    pub resources: Resources,
    /// The snapshot holding a workspace template's filesystem.
    pub snapshot_id: Option<Uuid>,
    /// The stored image a template that names one runs (`None`: `default`, or the
    /// snapshot's own image).
    pub image: Option<String>,
    pub created_at: Option<OffsetDateTime>,
    /// Network of its sandboxes; `None` = the server's default.
    pub network: Option<sandboxd_runtime::NetworkMode>,
    /// Disk size of its sandboxes in MiB (0: no limit): a workspace template's is the
    /// one it was built with, a built-in's the server's default.
    pub disk_mb: u32,
    /// The tier its sandboxes run on; `None` = the workspace's default, else the
    /// server's (a create's own choice goes first).
    pub isolation: Option<sandboxd_runtime::Isolation>,
    /// Whether its snapshot keeps memory: its sandboxes start as forks of the sandbox
    /// it was made from, with that sandbox's processes running (see
    /// [`Engine::template_from_sandbox`]).
    pub memory: bool,
}

impl Template {
    /// A create request for this template with `resources` (checked by the caller); its
    /// sandbox gets the template's disk (the engine takes it from the snapshot).
    pub fn create_request(&self, resources: Resources) -> CreateSandbox {
        CreateSandbox {
            name: None,
            resources,
            image: match self.snapshot_id {
                Some(_) => None,
                None => Some(self.image.clone().unwrap_or_else(|| "default".to_owned())),
            },
            snapshot_id: self.snapshot_id,
            environment: BTreeMap::new(),
            secrets: Vec::new(),
            metadata: BTreeMap::new(),
            timeout: None,
            auto_pause: false,
            network: self.network,
            egress: None,
            disk_mb: None,
            aliases: Default::default(),
            attributes: Default::default(),
            isolation: self.isolation,
        }
    }
}

/// What `build_template` runs.
#[derive(Debug, Clone)]
pub struct TemplateBuild {
    pub name: String,
    pub from: String,
    /// Shell commands run in order with `/bin/sh -c`; the first failure stops the build.
    pub steps: Vec<String>,
    /// The template's resources; `None` = the base template's.
    pub resources: Option<Resources>,
    /// Disk size in MiB (0: no limit) of the build sandbox and of every sandbox made
    /// from the template; `None` = the base template's.
    pub disk_mb: Option<u32>,
    pub step_timeout: Duration,
    /// The tier of the build sandbox and of every sandbox made from the template;
    /// `None` = the base template's (else the workspace's or server's at each create).
    pub isolation: Option<sandboxd_runtime::Isolation>,
}

/// The attribute key that marks a template's build sandbox, written with its record at
/// insert: re-adoption destroys a sandbox carrying it (its build died with the server
/// that ran it). Engine-owned; no dialect uses this key.
pub const BUILDER_ATTRIBUTE: &str = "sandboxd.template_build";

/// How long a build sandbox may live at most (its expiry, a backstop to the build's own
/// destroy): every step's time limit, plus time for the snapshot and the start.
fn builder_lifetime(build: &TemplateBuild) -> Duration {
    const MARGIN: Duration = Duration::from_secs(15 * 60);
    let steps = u32::try_from(build.steps.len()).unwrap_or(u32::MAX);
    build
        .step_timeout
        .checked_mul(steps)
        .and_then(|t| t.checked_add(MARGIN))
        .unwrap_or(Duration::from_secs(86_400))
        .min(Duration::from_secs(86_400 * 7))
}

/// Whether `sb` is a template's build sandbox (see [`BUILDER_ATTRIBUTE`]).
pub(crate) fn is_builder(sb: &crate::model::Sandbox) -> bool {
    sb.attributes.contains_key(BUILDER_ATTRIBUTE)
}

fn not_found(name: &str) -> EngineError {
    EngineError::new(
        ErrorCode::ImageNotFound,
        format!("template {name:?} not found"),
    )
}

fn builtin(name: &str, disk_mb: u32) -> Option<Template> {
    BUILTIN_TEMPLATES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(n, d, r)| Template {
            name: (*n).to_owned(),
            description: (*d).to_owned(),
            builtin: true,
            resources: *r,
            snapshot_id: None,
            image: None,
            created_at: None,
            network: None,
            disk_mb,
            isolation: None,
            memory: false,
        })
}

/// The template a stored image stands for: the `default` template's resources, the
/// server's disk size.
fn from_image(name: &str, image: &str, disk_mb: u32) -> Template {
    Template {
        name: name.to_owned(),
        description: format!("OCI image {image}"),
        builtin: false,
        resources: BUILTIN_TEMPLATES[0].2,
        snapshot_id: None,
        image: Some(image.to_owned()),
        created_at: None,
        network: None,
        disk_mb,
        isolation: None,
        memory: false,
    }
}

/// The workspace template a snapshot holds, if it is one; `default_disk` stands in for
/// a size that was not recorded.
fn from_snapshot(s: crate::model::Snapshot, default_disk: u32) -> Option<Template> {
    let name = s.name?.strip_prefix(TEMPLATE_SNAPSHOT_PREFIX)?.to_owned();
    Some(Template {
        description: format!("built from sandbox {}", s.source_sandbox_id),
        name,
        builtin: false,
        resources: s.resources,
        snapshot_id: Some(s.id),
        image: None,
        created_at: Some(s.created_at),
        network: None,
        disk_mb: s.disk_mb.unwrap_or(default_disk),
        isolation: None,
        memory: s.memory_image.is_some(),
    })
}

impl Engine {
    fn builtin_template(&self, name: &str) -> Option<Template> {
        builtin(name, self.limits.disk_mb_per_sandbox)
    }

    /// The workspace template snapshot `s` holds, with the tier it was built for.
    fn template_of(&self, s: crate::model::Snapshot) -> Result<Option<Template>, EngineError> {
        let ws = s.workspace.clone();
        let Some(mut t) = from_snapshot(s, self.limits.disk_mb_per_sandbox) else {
            return Ok(None);
        };
        t.isolation = self
            .store
            .get_template_isolation(&ws, &t.name)?
            .map(|name| crate::workspace_isolation::parse_stored(&name))
            .transpose()?;
        Ok(Some(t))
    }

    /// Built-in templates, then the workspace's own by name.
    pub async fn list_templates(&self, ws: &WorkspaceId) -> Result<Vec<Template>, EngineError> {
        let mut own = Vec::new();
        let mut page = PageRequest {
            limit: crate::cursor::MAX_PAGE,
            cursor: None,
        };
        loop {
            let got = self.list_snapshots(ws, None, page.clone()).await?;
            for s in got.items {
                own.extend(self.template_of(s)?);
            }
            match got.next_cursor {
                Some(c) => page.cursor = Some(c),
                None => break,
            }
        }
        own.sort_by(|a, b| a.name.cmp(&b.name));
        own.dedup_by(|a, b| a.name == b.name);
        let mut all: Vec<Template> = BUILTIN_TEMPLATES
            .iter()
            .filter_map(|t| self.builtin_template(t.0))
            .collect();
        all.extend(own);
        Ok(all)
    }

    /// A built-in or one of the workspace's templates, else a stored image of that name;
    /// `ImageNotFound` otherwise.
    pub async fn get_template(
        &self,
        ws: &WorkspaceId,
        name: &str,
    ) -> Result<Template, EngineError> {
        if let Some(t) = self.builtin_template(name) {
            return Ok(t);
        }
        let snap_name = format!("{TEMPLATE_SNAPSHOT_PREFIX}{name}");
        let page = PageRequest {
            limit: 1,
            cursor: None,
        };
        let got = self.list_snapshots(ws, Some(&snap_name), page).await?;
        for s in got.items {
            if let Some(t) = self.template_of(s)? {
                return Ok(t);
            }
        }
        let wanted = name.to_owned();
        match self.blocking(move |rt| rt.resolve_image(&wanted)).await? {
            Ok(image) => Ok(from_image(
                name,
                &image.name,
                self.limits.disk_mb_per_sandbox,
            )),
            Err(_) => Err(not_found(name)),
        }
    }

    /// Deletes a workspace template (and its layers no one else uses); audited as
    /// `template.delete`.
    pub async fn delete_template(
        &self,
        ws: &WorkspaceId,
        name: &str,
    ) -> Result<Template, EngineError> {
        let deleted = self.delete_template_unaudited(ws, name).await;
        self.audit(ws, "template.delete", Some(name.to_owned()), &deleted);
        deleted
    }

    async fn delete_template_unaudited(
        &self,
        ws: &WorkspaceId,
        name: &str,
    ) -> Result<Template, EngineError> {
        if self.builtin_template(name).is_some() {
            return Err(EngineError::new(
                ErrorCode::WrongState,
                format!("template {name:?} is built in"),
            ));
        }
        let t = self.get_template(ws, name).await?;
        match t.snapshot_id {
            Some(id) => {
                self.delete_snapshot(ws, id).await?;
                self.store.set_template_isolation(ws, name, None)?;
            }
            None => {
                return Err(EngineError::new(
                    ErrorCode::WrongState,
                    format!("template {name:?} is a stored image (sandboxd images rm)"),
                ))
            }
        }
        Ok(t)
    }

    /// Starts a sandbox from `from`, runs the steps, snapshots it as template `name`
    /// (replacing an older template of that name) and destroys the build sandbox;
    /// audited as `template.build` (after the build sandbox's own entries).
    ///
    /// The build runs in a task the engine owns, not in the caller's future: a caller
    /// that goes away (an HTTP client that disconnects, a CLI interrupted) leaves the
    /// build to finish, as an OpenRelay command runs on whether or not its client keeps
    /// reading; the template is made and the build sandbox destroyed all the same. The
    /// build sandbox carries [`BUILDER_ATTRIBUTE`] from its insert on, so a server
    /// killed mid-build destroys it when it starts again (re-adoption).
    pub async fn build_template(
        &self,
        ws: &WorkspaceId,
        build: TemplateBuild,
    ) -> Result<Template, EngineError> {
        let Some(me) = self.me.upgrade() else {
            return Err(EngineError::new(
                ErrorCode::Unavailable,
                "the engine is shutting down",
            ));
        };
        let ws = ws.clone();
        let task = crate::request::spawn_for_request(async move {
            let name = build.name.clone();
            let built = me.build_template_unaudited(&ws, build).await;
            me.audit(&ws, "template.build", Some(name), &built);
            built
        });
        task.await.map_err(|e| {
            EngineError::with_source(ErrorCode::Internal, "the template build task failed", e)
        })?
    }

    async fn build_template_unaudited(
        &self,
        ws: &WorkspaceId,
        build: TemplateBuild,
    ) -> Result<Template, EngineError> {
        validate::sandbox_name(&build.name)?;
        if self.builtin_template(&build.name).is_some() {
            return Err(EngineError::invalid(format!(
                "template {:?} is built in",
                build.name
            )));
        }
        if build.steps.iter().any(|s| s.contains('\0')) {
            return Err(EngineError::invalid("a build step contains a NUL byte"));
        }
        let base = self.get_template(ws, &build.from).await?;
        let resources = build.resources.unwrap_or(base.resources);
        let old = self.get_template(ws, &build.name).await.ok();
        let mut request = base.create_request(resources);
        request.disk_mb = build.disk_mb;
        let isolation = build.isolation.or(base.isolation);
        request.isolation = isolation;
        request.timeout = Some(builder_lifetime(&build));
        request.attributes.insert(
            BUILDER_ATTRIBUTE.to_owned(),
            serde_json::json!({ "template": build.name }),
        );
        // A build stores a snapshot: refused before its steps run when the workspace's
        // snapshot quota is used up (the snapshot itself checks again, under admission).
        self.check_snapshot_quota(ws)?;
        let (sb, _) = self.create(ws, request).await?;
        let built = self.run_steps_and_snapshot(ws, sb.id, &build).await;
        if let Err(e) = self.destroy(ws, sb.id).await {
            tracing::warn!(sandbox = %sb.id, error = %e, "cannot destroy a template build sandbox");
        }
        let snap = built?;
        if let Some(id) = old.and_then(|t| t.snapshot_id) {
            self.delete_snapshot(ws, id).await?;
        }
        let tier = isolation.map(|i| i.as_str());
        self.store.set_template_isolation(ws, &build.name, tier)?;
        self.template_of(snap)?
            .ok_or_else(|| not_found(&build.name))
    }

    /// Makes template `name` (replacing an older one of that name) from a snapshot of
    /// running sandbox `id`: on gVisor with its memory, so that its sandboxes start as
    /// forks of it (its processes running); on the container tier its filesystem.
    /// Audited as `template.build`.
    pub async fn template_from_sandbox(
        &self,
        ws: &WorkspaceId,
        name: &str,
        id: Uuid,
    ) -> Result<Template, EngineError> {
        let made = self.template_from_sandbox_unaudited(ws, name, id).await;
        self.audit(ws, "template.build", Some(name.to_owned()), &made);
        made
    }

    async fn template_from_sandbox_unaudited(
        &self,
        ws: &WorkspaceId,
        name: &str,
        id: Uuid,
    ) -> Result<Template, EngineError> {
        validate::sandbox_name(name)?;
        if self.builtin_template(name).is_some() {
            return Err(EngineError::invalid(format!(
                "template {name:?} is built in"
            )));
        }
        let old = self.get_template(ws, name).await.ok();
        let snap_name = format!("{TEMPLATE_SNAPSHOT_PREFIX}{name}");
        let snap = self.snapshot_with(ws, id, Some(snap_name), true).await?;
        if let Some(old) = old.and_then(|t| t.snapshot_id) {
            self.delete_snapshot(ws, old).await?;
        }
        self.template_of(snap)?.ok_or_else(|| not_found(name))
    }

    async fn run_steps_and_snapshot(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        build: &TemplateBuild,
    ) -> Result<crate::model::Snapshot, EngineError> {
        for (i, step) in build.steps.iter().enumerate() {
            let cmd = ExecCommand {
                argv: vec!["/bin/sh".into(), "-c".into(), step.clone()],
                env: None,
                cwd: None,
                timeout: build.step_timeout,
                max_output_bytes: 16 << 20,
            };
            let out = self.exec(ws, id, cmd).await?;
            let code = out.exit.map(crate::output::ProcessExit::shell_code);
            if code != Some(0) {
                let stderr = &out.stderr;
                let tail = String::from_utf8_lossy(&stderr[stderr.len().saturating_sub(2000)..])
                    .into_owned();
                return Err(EngineError::invalid(format!(
                    "build step {} ({step:?}) failed with exit code {code:?}: {tail}",
                    i + 1,
                )));
            }
        }
        let name = format!("{TEMPLATE_SNAPSHOT_PREFIX}{}", build.name);
        // A built template is its filesystem: its sandboxes start fresh, not as forks
        // of the build's (whose steps are done).
        self.snapshot_with(ws, id, Some(name), false).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Snapshot;

    fn snapshot(name: Option<&str>) -> Snapshot {
        Snapshot {
            id: Uuid::new_v4(),
            workspace: "w".into(),
            name: name.map(String::from),
            source_sandbox_id: Uuid::new_v4(),
            image: "default".into(),
            layers: vec!["a".into()],
            digest: "a".into(),
            size_bytes: 1,
            resources: Resources {
                vcpu: 1,
                memory_mb: 512,
            },
            created_at: OffsetDateTime::UNIX_EPOCH,
            expires_at: None,
            disk_mb: Some(64),
            memory_image: None,
        }
    }

    #[test]
    fn templates_are_snapshots_with_the_prefix() {
        let t = from_snapshot(snapshot(Some("template:web")), 1024).expect("a template");
        assert_eq!(
            (t.name.as_str(), t.builtin, t.resources.memory_mb, t.disk_mb),
            ("web", false, 512, 64)
        );
        let unrecorded = Snapshot {
            disk_mb: None,
            ..snapshot(Some("template:old"))
        };
        assert_eq!(
            from_snapshot(unrecorded, 1024).map(|t| t.disk_mb),
            Some(1024)
        );
        let req = t.create_request(t.resources);
        assert_eq!(
            (req.image, req.snapshot_id, req.disk_mb),
            (None, t.snapshot_id, None),
            "the engine takes the disk from the snapshot"
        );
        assert!(from_snapshot(snapshot(Some("web")), 1024).is_none());
        assert!(from_snapshot(snapshot(None), 1024).is_none());
    }

    #[test]
    fn an_image_template_runs_its_image() {
        let t = from_image("app:v1", "docker.io/library/app:v1", 512);
        let req = t.create_request(t.resources);
        assert_eq!(
            (req.image.as_deref(), req.snapshot_id, t.builtin),
            (Some("docker.io/library/app:v1"), None, false)
        );
    }

    #[test]
    fn builtins_run_on_the_default_image() {
        let python = builtin("python", 2048).expect("python");
        assert_eq!(python.disk_mb, 2048, "the server's default");
        let req = python.create_request(python.resources);
        assert_eq!(
            (req.image.as_deref(), req.snapshot_id),
            (Some("default"), None)
        );
        assert!(builtin("nope", 2048).is_none());
    }
}
