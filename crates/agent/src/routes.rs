//! Request routing: parse the request, call one operation, render its result or error.

use crate::body::{self, Body};
use crate::error::{error, invalid};
use crate::follow::{Reader, Source, Start};
use crate::shared::Shared;
use crate::{exec, files, processes};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use sandboxd_agent_protocol::query::parse_query;
use sandboxd_agent_protocol::{
    AgentError, AgentErrorCode, Health, SignalRequest, StartProcess, UserIds, PROTOCOL_VERSION,
};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Largest JSON request body accepted.
const MAX_JSON: usize = 1024 * 1024;

/// hyper's service function: never fails, errors become typed JSON bodies.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    Ok(route(&shared, req)
        .await
        .unwrap_or_else(|e| body::error(&e)))
}

struct Query(Vec<(String, String)>);

impl Query {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn number(&self, key: &str) -> Result<Option<u64>, AgentError> {
        self.get(key)
            .map(|v| {
                v.parse()
                    .map_err(|_| invalid(format!("{key} must be a number")))
            })
            .transpose()
    }

    fn flag(&self, key: &str) -> Result<bool, AgentError> {
        match self.get(key) {
            None | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") | Some("") => Ok(true),
            Some(v) => Err(invalid(format!("{key} must be true or false, not {v:?}"))),
        }
    }
}

async fn json_body<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
) -> Result<T, AgentError> {
    let bytes = Limited::new(req.into_body(), MAX_JSON)
        .collect()
        .await
        .map_err(|e| invalid(format!("cannot read request body: {e}")))?
        .to_bytes();
    serde_json::from_slice(&bytes).map_err(|e| invalid(format!("bad JSON body: {e}")))
}

fn process_id(s: &str) -> Result<Uuid, AgentError> {
    Uuid::parse_str(s).map_err(|_| invalid(format!("bad process id {s:?}")))
}

async fn route(shared: &Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, AgentError> {
    let query =
        Query(parse_query(req.uri().query().unwrap_or("")).map_err(|e| invalid(e.to_string()))?);
    let path = req.uri().path().to_owned();
    let Some(rest) = path.strip_prefix("/v1/") else {
        return Err(invalid(format!("no route {path}")));
    };
    let segments: Vec<&str> = rest.split('/').collect();
    let method = req.method().clone();
    match (&method, segments.as_slice()) {
        (&Method::GET, ["health"]) => Ok(body::json(
            StatusCode::OK,
            &Health {
                protocol: PROTOCOL_VERSION,
                pid: std::process::id(),
            },
        )),
        (&Method::POST, ["exec"]) => {
            let result = exec::exec(shared, json_body(req).await?).await?;
            Ok(body::json(StatusCode::OK, &result))
        }
        (&Method::POST, ["processes"]) if query.flag("follow")? => {
            start_following(shared, json_body(req).await?)
        }
        (&Method::POST, ["processes"]) => {
            let info = processes::start(shared, json_body(req).await?)?;
            Ok(body::json(StatusCode::OK, &info))
        }
        (&Method::GET, ["processes"]) => {
            let after = query.get("after").map(process_id).transpose()?;
            let limit = match query.number("limit")? {
                None | Some(0) => usize::MAX,
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            };
            let page = shared.registry().list_page(after, limit);
            Ok(body::json(StatusCode::OK, &page))
        }
        (&Method::GET, ["processes", id]) => Ok(body::json(
            StatusCode::OK,
            &shared.registry().get(process_id(id)?)?,
        )),
        (&Method::POST, ["processes", id, "signal"]) => {
            let id = process_id(id)?;
            signal(shared, id, json_body(req).await?)?;
            Ok(body::no_content())
        }
        (&Method::POST, ["processes", id, "wait"]) => {
            let timeout = query.number("timeout_ms")?.map(Duration::from_millis);
            wait(shared, process_id(id)?, timeout).await
        }
        (&Method::GET, ["processes", id, "output"]) => {
            let start = Start {
                tail_bytes: query.number("tail_bytes")?.unwrap_or(0),
                from: query.number("from")?,
                follow: query.flag("follow")?,
                hold: query.flag("hold")?,
            };
            let source = Source::Process(process_id(id)?);
            let reader = Reader::open(shared.clone(), source, start)?;
            Ok(body::ndjson(reader.into_stream()))
        }
        (&Method::GET, ["pty"]) => {
            let size = |k: &str, default: u16| -> Result<u16, AgentError> {
                let n = query.number(k)?.unwrap_or(u64::from(default));
                u16::try_from(n)
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| invalid(format!("{k} must be 1-65535")))
            };
            let (cols, rows) = (size("cols", 80)?, size("rows", 24)?);
            let cwd = query.get("cwd").unwrap_or("/").to_owned();
            let id = |k: &str| -> Result<Option<u32>, AgentError> {
                query
                    .number(k)?
                    .map(|n| u32::try_from(n).map_err(|_| invalid(format!("{k} is out of range"))))
                    .transpose()
            };
            let user = match (id("uid")?, id("gid")?) {
                (Some(uid), Some(gid)) => {
                    let groups = query
                        .get("groups")
                        .unwrap_or("")
                        .split(',')
                        .filter(|g| !g.is_empty())
                        .map(|g| g.parse().map_err(|_| invalid("groups must be numbers")))
                        .collect::<Result<Vec<u32>, AgentError>>()?;
                    Some(UserIds { uid, gid, groups })
                }
                (None, None) => None,
                _ => return Err(invalid("uid and gid come together")),
            };
            crate::pty::open(shared, req, cols, rows, &cwd, user)
        }
        (&Method::GET, ["logs"]) => {
            let start = Start {
                tail_bytes: 0,
                from: query.number("from")?,
                follow: query.flag("follow")?,
                hold: false,
            };
            let reader = Reader::open(shared.clone(), Source::Log, start)?;
            Ok(body::ndjson(reader.into_stream()))
        }
        (&Method::GET, ["files"]) => {
            let path = query
                .get("path")
                .ok_or_else(|| invalid("path is required"))?;
            let (meta, stream) = files::open(path)?;
            let mut resp = Response::new(body::from_stream(stream));
            let h = resp.headers_mut();
            h.insert(http::header::CONTENT_LENGTH, meta.size.into());
            h.insert(
                "x-file-mode",
                format!("{:04o}", meta.mode)
                    .parse()
                    .map_err(|_| invalid("mode"))?,
            );
            h.insert("x-file-mtime", meta.mtime.into());
            h.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/octet-stream"),
            );
            Ok(resp)
        }
        (&Method::PUT, ["files"]) => {
            let path = query
                .get("path")
                .ok_or_else(|| invalid("path is required"))?
                .to_owned();
            let mode = files::parse_mode(query.get("mode"))?;
            let written = files::write(&path, mode, req.into_body()).await?;
            Ok(body::json(StatusCode::OK, &written))
        }
        _ => Err(invalid(format!("no route {method} {path}"))),
    }
}

/// Starts the process and answers its output from the first byte, then live output
/// until `Exit`, as one NDJSON stream (its holder, when it is held): a start and its
/// follow in one exchange. A reader that cannot open kills what was started.
fn start_following(shared: &Arc<Shared>, req: StartProcess) -> Result<Response<Body>, AgentError> {
    let (id, hold) = (req.id, req.hold_output);
    processes::start(shared, req)?;
    let start = Start {
        tail_bytes: 0,
        from: Some(0),
        follow: true,
        hold,
    };
    match Reader::open(shared.clone(), Source::Process(id), start) {
        Ok(reader) => Ok(body::ndjson(reader.into_stream())),
        Err(e) => {
            let kill = SignalRequest {
                signal: libc::SIGKILL,
                group: true,
            };
            let _ = signal(shared, id, kill);
            Err(e)
        }
    }
}

fn signal(shared: &Shared, id: Uuid, req: SignalRequest) -> Result<(), AgentError> {
    if !(1..=64).contains(&req.signal) {
        return Err(invalid(format!("signal {} is outside 1..=64", req.signal)));
    }
    let Some(pid) = shared.registry().signal_target(id)? else {
        return Ok(());
    };
    let target = if req.group { -(pid as i32) } else { pid as i32 };
    // SAFETY: kill(2) on a child (or its group) that has not been reaped yet.
    if unsafe { libc::kill(target, req.signal) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(error(AgentErrorCode::Io, format!("kill: {e}")));
        }
    }
    Ok(())
}

async fn wait(
    shared: &Shared,
    id: Uuid,
    timeout: Option<Duration>,
) -> Result<Response<Body>, AgentError> {
    let mut done = shared.registry().watch_done(id)?;
    let finished = done.wait_for(|d| *d);
    let ok = match timeout {
        Some(t) => tokio::time::timeout(t, finished).await.is_ok(),
        None => finished.await.is_ok(),
    };
    if !ok {
        return Err(error(
            AgentErrorCode::WaitTimedOut,
            format!("process {id} still running"),
        ));
    }
    Ok(body::json(StatusCode::OK, &shared.registry().get(id)?))
}
