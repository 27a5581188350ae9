//! Operations answered by the agent inside a RUNNING sandbox, and what they share:
//! the state guard, the default environment, and crash detection.

mod answer;
mod exec;
mod exec_stream;
mod files;
mod processes;
mod shell;
mod streams;
mod terminal;

use crate::agent_error;
use crate::convert::Entry;
use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::in_flight::InFlightSlot;
use crate::lifecycle::wrong_state;
use crate::model::{EndReason, WorkspaceId};
use crate::state::SandboxStatus;
use sandboxd_agent_protocol::{AgentClient, ClientError};
use std::collections::BTreeMap;
use std::future::Future;
use uuid::Uuid;

pub use answer::DEFAULT_AGENT_ANSWER;
pub use exec_stream::{
    ExecEnd, ExecEvent, ExecStream, OnCap, SandboxEnd, StreamCommand, KILLED_EXIT, TIMED_OUT_EXIT,
};
pub use shell::missing_shell;

/// Resolves the image user `spec` through the passwd and group files of `layers`.
pub(crate) fn user_in_layers(
    runtime: &dyn sandboxd_runtime::Runtime,
    layers: &[String],
    spec: &str,
) -> Result<(sandboxd_agent_protocol::UserIds, Option<String>), EngineError> {
    use sandboxd_runtime::ImageFile;
    let read = |path: &str| match runtime.read_image_file(layers, path, 4 << 20) {
        Ok(ImageFile::Content(bytes)) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Ok(ImageFile::Absent) => Ok(None),
        Ok(ImageFile::Unreadable(why)) => Err(EngineError::invalid(format!(
            "cannot resolve the image's user {spec:?}: {why}"
        ))),
        Err(e) => Err(EngineError::new(
            ErrorCode::Internal,
            format!("reading the image's {path}: {e}"),
        )),
    };
    let passwd = read("/etc/passwd")?;
    let group = read("/etc/group")?;
    crate::image_user::resolve_with_home(spec, passwd.as_deref(), group.as_deref())
        .map_err(EngineError::invalid)
}

/// The environment the agent gives a command when none is sent; the engine sends it
/// itself whenever the sandbox has create-time variables or secrets to add.
pub const AGENT_DEFAULT_ENV: [(&str, &str); 4] = [
    ("PATH", sandboxd_agent_protocol::DEFAULT_PATH),
    ("HOME", "/root"),
    ("TERM", "xterm-256color"),
    ("LANG", "C.UTF-8"),
];

/// How long an agent call holds the sandbox's shared lock.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// For the whole call (bounded calls: lifecycle changes wait for it).
    Call,
    /// Only for the state check (waits, streams, uploads: unbounded in time).
    Check,
}

impl Engine {
    /// Runs one agent call against a RUNNING sandbox of `ws`. An unreachable agent
    /// whose sandbox turns out dead ends the sandbox (TERMINATED, `crashed`); one that
    /// answers neither the call nor a health check in time fails it as `Unavailable`
    /// (see [`answer::answered`]; for streams this bounds the start of the answer).
    /// A `Hold::Check` call (unbounded in time) counts as one of the workspace's
    /// long-lived requests in flight until it ends: past the cap it is refused; it ends
    /// as `KeyRevoked` once the key that opened it is revoked.
    pub(crate) async fn with_agent<T, Fut>(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        hold: Hold,
        call: impl FnOnce(AgentClient, &Entry) -> Result<Fut, EngineError>,
    ) -> Result<T, EngineError>
    where
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let Hold::Check = hold else {
            return self.agent_call(ws, id, hold, call).await;
        };
        let slot = self.in_flight.acquire(ws)?;
        tokio::select! {
            biased;
            () = slot.revoked() => Err(crate::revocations::key_revoked()),
            answer = self.agent_call(ws, id, hold, call) => answer,
        }
    }

    /// [`Engine::with_agent`] for a long-lived call whose answer (a stream, a
    /// terminal) outlives it: the workspace's place in flight comes back with the
    /// answer, to be kept as long as it is.
    pub(crate) async fn with_agent_held<T, Fut>(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        call: impl FnOnce(AgentClient, &Entry) -> Result<Fut, EngineError>,
    ) -> Result<(T, InFlightSlot), EngineError>
    where
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let slot = self.in_flight.acquire(ws)?;
        let answer = self.agent_call(ws, id, Hold::Check, call).await?;
        Ok((answer, slot))
    }

    pub(super) async fn agent_call<T, Fut>(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        hold: Hold,
        call: impl FnOnce(AgentClient, &Entry) -> Result<Fut, EngineError>,
    ) -> Result<T, EngineError>
    where
        Fut: Future<Output = Result<T, ClientError>>,
    {
        // In use until the call ends (not idle for autoPause); woken first if on disk.
        let busy = self.activity.begin(id);
        let (guard, e) = self.shared_awake(ws, id).await?;
        if e.sb.status != SandboxStatus::Running {
            return Err(wrong_state(&e.sb, "RUNNING"));
        }
        let Some(handle) = &e.handle else {
            return Err(EngineError::new(
                ErrorCode::Internal,
                format!("sandbox {id} has no handle"),
            ));
        };
        let client = AgentClient::new(&handle.agent_socket);
        let pending = call(client.clone(), &e)?;
        // Shadowing would not release it: a `Check` guard is dropped explicitly.
        let guard = match hold {
            Hold::Call => Some(guard),
            Hold::Check => {
                drop(guard);
                None
            }
        };
        let bound = self.limits.agent_answer;
        let result = answer::answered(client, bound, pending).await;
        drop(guard);
        drop(busy);
        let Some(result) = result else {
            tracing::warn!(sandbox = %id, "the sandbox's agent did not answer in time");
            return Err(answer::not_answering(bound));
        };
        match result {
            Ok(v) => Ok(v),
            Err(err) => {
                if agent_error::is_unreachable(&err) {
                    self.end_if_dead(ws, id).await;
                }
                Err(agent_error::map(err))
            }
        }
    }

    /// Ends a RUNNING sandbox whose agent is no longer alive.
    async fn end_if_dead(&self, ws: &str, id: Uuid) {
        let _guard = self.locks.get(id).write_owned().await;
        let Ok(mut e) = self.load(ws, id) else { return };
        let Some(handle) = e
            .handle
            .clone()
            .filter(|_| e.sb.status == SandboxStatus::Running)
        else {
            return;
        };
        if let Ok(false) = self.blocking(move |rt| rt.is_alive(&handle)).await {
            tracing::warn!(sandbox = %id, "agent gone; ending the sandbox as crashed");
            if let Err(err) = self.end(&mut e, EndReason::Crashed).await {
                tracing::warn!(sandbox = %id, error = %err, "cannot end crashed sandbox");
            }
        }
    }

    /// The environment a command gets when the caller sends none: `None` (the agent's
    /// defaults) unless the sandbox adds variables or secrets on top of them.
    /// The environment a command in sandbox `id` gets by default (the agent's
    /// defaults, the sandbox's create-time environment and its secrets), with `extra`
    /// on top: for dialects whose commands add to the environment rather than replace it.
    pub fn command_env(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        extra: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        let mut env = match self.default_env(&self.load(ws, id)?)? {
            Some(env) => env,
            None => AGENT_DEFAULT_ENV
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(env)
    }

    /// The configuration of the image sandbox `e` runs (none for the built-in one, or
    /// when the image has gone since).
    fn image_config(&self, e: &Entry) -> Option<sandboxd_runtime::ImageConfig> {
        if e.sb.image == "default" {
            return None;
        }
        self.runtime
            .resolve_image(&e.sb.image)
            .ok()
            .map(|i| i.config)
    }

    /// The ids a command in sandbox `e` runs as: its image's `User`, resolved through
    /// the image's `/etc/passwd` and `/etc/group` (with the sandbox's snapshot layers
    /// on top); `None` (root) when the image names none.
    pub(crate) fn image_user(
        &self,
        e: &Entry,
    ) -> Result<Option<sandboxd_agent_protocol::UserIds>, EngineError> {
        Ok(self.image_user_and_home(e)?.map(|(ids, _)| ids))
    }

    /// [`Engine::image_user`] with the user's home directory from the image's passwd.
    fn image_user_and_home(
        &self,
        e: &Entry,
    ) -> Result<Option<(sandboxd_agent_protocol::UserIds, Option<String>)>, EngineError> {
        if e.sb.image == "default" {
            return Ok(None);
        }
        let Ok(image) = self.runtime.resolve_image(&e.sb.image) else {
            return Ok(None);
        };
        let Some(spec) = image.config.user.as_deref() else {
            return Ok(None);
        };
        let mut layers = image.layers.clone();
        layers.extend(e.extra_layers.iter().cloned());
        user_in_layers(&*self.runtime, &layers, spec).map(Some)
    }

    /// The working directory a command in sandbox `e` gets when it names none: its
    /// image's `WorkingDir`.
    pub(crate) fn image_cwd(&self, e: &Entry) -> Option<String> {
        self.image_config(e)?.working_dir
    }

    pub(crate) fn default_env(
        &self,
        e: &Entry,
    ) -> Result<Option<BTreeMap<String, String>>, EngineError> {
        let image = self.image_config(e).filter(|c| !c.env.is_empty());
        // The image user's home (from its passwd), under the image's own `Env`.
        let home = self.image_user_and_home(e)?.and_then(|(_, home)| home);
        let nothing_to_add = e.sb.environment.is_empty() && e.sb.secrets.is_empty();
        if nothing_to_add && image.is_none() && home.is_none() {
            return Ok(None);
        }
        let mut env: BTreeMap<String, String> = AGENT_DEFAULT_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(home) = home {
            env.insert("HOME".into(), home);
        }
        // The image's environment, under the sandbox's own.
        if let Some(image) = &image {
            env.extend(image.env_pairs().map(|(k, v)| (k.to_owned(), v.to_owned())));
        }
        env.extend(e.sb.environment.clone());
        for name in &e.sb.secrets {
            // A secret deleted since the sandbox was created is simply left out.
            if let Some(value) = self.store.get_secret(&e.sb.workspace, name)? {
                env.insert(name.clone(), String::from_utf8_lossy(&value).into_owned());
            }
        }
        Ok(Some(env))
    }
}
