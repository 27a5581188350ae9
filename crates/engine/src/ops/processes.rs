//! Managed processes: start, list, get, signal, wait.

use super::Hold;
use crate::convert::Entry;
use crate::cursor;
use crate::engine::Engine;
use crate::error::{EngineError, ErrorCode};
use crate::model::{Page, PageRequest, ProcessInfo, StartCommand, WorkspaceId};
use crate::output::{from_frames, OutputStream};
use crate::validate;
use sandboxd_agent_protocol::limits::process_page_answer_bytes;
use sandboxd_agent_protocol::{ClientError, SignalRequest, StartProcess};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

const SIGKILL: i32 = 9;

impl Engine {
    /// Starts a managed process; the engine chooses its id (UUID v4).
    pub async fn start_process(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        cmd: StartCommand,
    ) -> Result<ProcessInfo, EngineError> {
        validate::command(&cmd.argv, cmd.env.as_ref(), cmd.cwd.as_deref())?;
        self.with_agent(ws, id, Hold::Call, |client, e| {
            let req = self.start_request(e, cmd, false)?;
            Ok(async move { client.start_process(&req).await })
        })
        .await
        .map(Into::into)
    }

    /// Starts a held process (it keeps every output byte for this reader, waiting for
    /// it rather than dropping any) and follows its output from the first byte until
    /// `Exit`, in one exchange with the agent; the process's id and its output. A
    /// failure after the request went out kills whatever may have started (a caller
    /// that must not be cancelled midway runs it on a task of its own, as
    /// `exec_stream` does), unless the agent refused the start: then nothing runs.
    ///
    /// `held` (the caller's session and in-flight slot) comes back with the stream, or
    /// goes with the kill: released only once the kill is answered, so that a command
    /// a slow agent did start is counted until it is surely ended.
    pub(crate) async fn start_following<H: Send + 'static>(
        self: &Arc<Self>,
        ws: &WorkspaceId,
        id: Uuid,
        cmd: StartCommand,
        held: H,
    ) -> Result<(Uuid, OutputStream, H), EngineError> {
        validate::command(&cmd.argv, cmd.env.as_ref(), cmd.cwd.as_deref())?;
        let mut sent = None;
        // Set from the call's future, since `agent_call` maps the agent's error to the
        // engine's: a typed refusal (a missing working directory or program) leaves
        // nothing running (see `AgentClient::start_following`), so nothing to kill.
        let refused = AtomicBool::new(false);
        // The sandbox's lock is held until the agent answers the start (its stream's
        // head), as for a plain start: a destroy or pause waits for that, not for the
        // stream, which is read without it.
        let followed = self
            .agent_call(ws, id, Hold::Call, |client, e| {
                let req = self.start_request(e, cmd, true)?;
                sent = Some(req.id);
                let refused = &refused;
                Ok(async move {
                    let answer = client.start_following(&req).await;
                    if let Err(ClientError::Agent(_)) = &answer {
                        refused.store(true, Ordering::Relaxed);
                    }
                    answer
                })
            })
            .await;
        match (followed, sent) {
            (Ok(frames), Some(pid)) => Ok((pid, from_frames(frames), held)),
            (Ok(_), None) => Err(EngineError::new(
                ErrorCode::Internal,
                "a process was followed before it was asked for",
            )),
            (Err(e), Some(pid)) if !refused.load(Ordering::Relaxed) => {
                self.kill_unfollowed(ws, id, pid, held);
                Err(e)
            }
            (Err(e), _) => Err(e),
        }
    }

    /// Kills process `pid`, whose start may have run but could not be followed, on a
    /// task of its own: its error reaches the caller now rather than after the kill,
    /// which an agent that did not answer the start (frozen, hung) would not answer
    /// either, holding the error as long again. Not bounded shorter: a slow agent that
    /// did start the command still gets the whole bound to hear the kill, or the
    /// command would run on with no driver (no timeout, output cap or session count).
    /// `held` is dropped once the kill is answered (or given up).
    fn kill_unfollowed<H: Send + 'static>(
        self: &Arc<Self>,
        ws: &WorkspaceId,
        id: Uuid,
        pid: Uuid,
        held: H,
    ) {
        // Logged when sent, not only when failed: a refusal's test looks for its absence.
        tracing::debug!(sandbox = %id, process = %pid, "killing a start that was not followed");
        let (engine, ws) = (self.clone(), ws.clone());
        crate::request::spawn_for_request(async move {
            if let Err(e) = engine.signal_process(&ws, id, pid, SIGKILL, true).await {
                tracing::debug!(sandbox = %id, error = %e, "cannot kill an unfollowed start");
            }
            drop(held);
        });
    }

    /// The agent's start request for `cmd` in sandbox `e` (its image's user, working
    /// directory and environment unless `cmd` names them).
    fn start_request(
        &self,
        e: &Entry,
        cmd: StartCommand,
        held: bool,
    ) -> Result<StartProcess, EngineError> {
        let env = match cmd.env {
            Some(env) => Some(env),
            None => self.default_env(e)?,
        };
        Ok(StartProcess {
            id: Uuid::new_v4(),
            argv: cmd.argv,
            env,
            cwd: cmd.cwd.or_else(|| self.image_cwd(e)),
            hold_output: held,
            user: self.image_user(e)?,
        })
    }

    /// The sandbox's managed processes sorted by id; the cursor is the last id seen.
    /// The agent is asked for one page (plus one, to tell whether more follow); an
    /// agent that sends more is cut to the page here. The answer is buffered like an
    /// exec's: it holds room in the server's output budget for the most a page can take
    /// (`CapacityExhausted` when none frees up soon, `RateLimited` past the workspace's
    /// share) and a place among the workspace's requests in flight (`RateLimited` at
    /// its cap) until it is built.
    pub async fn list_processes(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        page: PageRequest,
    ) -> Result<Page<ProcessInfo>, EngineError> {
        let limit = cursor::page_size(page.limit) as usize;
        let after = page.cursor.as_deref().map(cursor::decode_id).transpose()?;
        let ask = u32::try_from(limit + 1).unwrap_or(u32::MAX);
        // Charged as output at the budget's rate per byte: the agent's answer, the
        // parsed list and the dialect's answer are held together like an exec's.
        let room = process_page_answer_bytes(ask);
        let _hold = self.output_budget.reserve(ws, room).await?;
        let _slot = self.in_flight.acquire(ws)?;
        let mut all: Vec<ProcessInfo> = self
            .with_agent(ws, id, Hold::Call, |client, _| {
                Ok(async move { client.list_processes_page(after, ask).await })
            })
            .await?
            .into_iter()
            .map(Into::into)
            .collect();
        all.sort_by_key(|p| p.id);
        let mut items: Vec<ProcessInfo> = all
            .into_iter()
            .filter(|p| after.is_none_or(|a| p.id > a))
            .take(limit + 1)
            .collect();
        let more = items.len() > limit;
        items.truncate(limit);
        let next_cursor = match (more, items.last()) {
            (true, Some(last)) => Some(cursor::encode_id(last.id)),
            _ => None,
        };
        Ok(Page { items, next_cursor })
    }

    pub async fn get_process(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        pid: Uuid,
    ) -> Result<ProcessInfo, EngineError> {
        self.with_agent(ws, id, Hold::Call, |client, _| {
            Ok(async move { client.get_process(pid).await })
        })
        .await
        .map(Into::into)
    }

    /// Sends `signal` (1–64) to the process, or to its process group when `group`.
    pub async fn signal_process(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        pid: Uuid,
        signal: i32,
        group: bool,
    ) -> Result<(), EngineError> {
        validate::signal(signal)?;
        let req = SignalRequest { signal, group };
        self.with_agent(ws, id, Hold::Call, |client, _| {
            Ok(async move { client.signal(pid, &req).await })
        })
        .await
    }

    /// Waits until the process ends; `WaitTimedOut` after `timeout`.
    pub async fn wait_process(
        &self,
        ws: &WorkspaceId,
        id: Uuid,
        pid: Uuid,
        timeout: Duration,
    ) -> Result<ProcessInfo, EngineError> {
        self.with_agent(ws, id, Hold::Check, |client, _| {
            Ok(async move { client.wait(pid, timeout).await })
        })
        .await
        .map(Into::into)
    }
}
