//! One helper for the Inngest dialect's HTTP tests: a fresh engine over the real Linux
//! backend, the server's router driven in-process, and cleanup even after a panic.

#![allow(dead_code)]

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use futures_util::FutureExt;
use http_body_util::BodyExt;
use sandboxd_engine::{Engine, EngineConfig, Limits, ALL_PERMISSIONS, DEFAULT_WORKSPACE};
use sandboxd_runtime::linux::{LinuxConfig, LinuxRuntime};
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

pub const MASTER: &str = "inngest-http-test-master-key";

/// A fresh engine with the master key (default workspace) and a second workspace's key.
pub struct Api {
    pub engine: Arc<Engine>,
    pub other_key: String,
    _dir: tempfile::TempDir,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: bytes::Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The error code of an error reply, after checking the envelope and `no-store`.
    pub fn code(&self) -> String {
        assert_eq!(self.headers[header::CACHE_CONTROL], "no-store");
        let v = self.json();
        assert_eq!(v["errors"].as_array().map(Vec::len), Some(1), "{v}");
        v["errors"][0]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn expect(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status.as_u16(), self.code().as_str()),
            (status, code),
            "{}",
            self.json()
        );
    }
}

impl Api {
    pub async fn start() -> Api {
        let dir = tempfile::tempdir().expect("temp dir");
        let runtime = LinuxRuntime::new(LinuxConfig {
            data_dir: dir.path().join("runtime"),
            init_exe: env!("CARGO_BIN_EXE_sandboxd").into(),
            init_args: vec!["__sandbox-init".into()],
            // One of its own, which its runtime made and so removes once done (a
            // shared one, made by one test and left by another, stayed behind).
            cgroup_parent: format!(
                "sandboxd-test-{}",
                dir.path()
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("x")
                    .trim_start_matches('.')
            ),
            max_ptys_per_sandbox: sandboxd_runtime::linux::DEFAULT_MAX_PTYS,
        })
        .expect("linux runtime");
        let store = sandboxd_store::SqliteStore::open(dir.path().join("db.sqlite")).expect("store");
        let engine = Engine::open(EngineConfig {
            data_dir: dir.path().to_owned(),
            runtime: Arc::new(runtime),
            store: Arc::new(store),
            limits: Limits {
                // A shared test host's free space must not refuse creates (admission is
                // tested on a filesystem of its own in full_disk.rs).
                disk_policy: sandboxd_engine::DiskPolicy {
                    overcommit_percent: 100_000,
                    reserve_mb: 64,
                },
                ..Limits::default()
            },
        })
        .expect("engine");
        engine.ensure_master_key(MASTER).expect("master key");
        let other = engine
            .create_workspace("other", [("inngest".into(), "staging".into())].into())
            .expect("workspace");
        let other_key = engine
            .create_key(Some(&other.id), vec![ALL_PERMISSIONS.into()], vec![])
            .expect("key");
        Api {
            engine,
            other_key,
            _dir: dir,
        }
    }

    /// Runs `test`, then destroys every sandbox it left, even when it panicked.
    pub async fn run<F, Fut>(test: F)
    where
        F: FnOnce(Arc<Api>) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let api = Arc::new(Api::start().await);
        let outcome = std::panic::AssertUnwindSafe(test(api.clone()))
            .catch_unwind()
            .await;
        api.destroy_all().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }

    pub async fn destroy_all(&self) {
        let ws = DEFAULT_WORKSPACE.to_owned();
        let page = sandboxd_engine::PageRequest {
            limit: 250,
            cursor: None,
        };
        let Ok(page) = self.engine.list(&ws, page).await else {
            return;
        };
        for sandbox in page.items.iter().filter(|s| s.status.is_active()) {
            let _ = self.engine.destroy(&ws, sandbox.id).await;
        }
    }

    pub async fn send(
        &self,
        key: Option<&str>,
        req: axum::http::request::Builder,
        body: Body,
    ) -> Reply {
        let req = match key {
            Some(key) => req.header(header::AUTHORIZATION, format!("Bearer {key}")),
            None => req,
        };
        let app = sandboxd_server::app(self.engine.clone());
        let response = app
            .oneshot(req.body(body).expect("request"))
            .await
            .expect("infallible");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// A GET whose answer is handed over unread (streams).
    pub async fn open(&self, uri: &str) -> axum::response::Response {
        let req = Request::get(uri)
            .header(header::AUTHORIZATION, format!("Bearer {MASTER}"))
            .body(Body::empty())
            .expect("request");
        sandboxd_server::app(self.engine.clone())
            .oneshot(req)
            .await
            .expect("infallible")
    }

    pub async fn get(&self, uri: &str) -> Reply {
        self.send(Some(MASTER), Request::get(uri), Body::empty())
            .await
    }

    pub async fn post(&self, uri: &str, body: Value) -> Reply {
        let req = Request::post(uri).header(header::CONTENT_TYPE, "application/json");
        self.send(Some(MASTER), req, Body::from(body.to_string()))
            .await
    }

    pub async fn raw(
        &self,
        method: Method,
        uri: &str,
        content_type: &str,
        body: impl Into<Body>,
    ) -> Reply {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::CONTENT_TYPE, content_type);
        self.send(Some(MASTER), req, body.into()).await
    }

    /// Creates a RUNNING sandbox and returns its id.
    pub async fn sandbox(&self, name: &str) -> String {
        let reply = self
            .post(
                "/v2/sandboxes",
                json!({"name": name, "vcpu": 1, "memoryMb": 256}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.json());
        reply.json()["data"]["id"].as_str().expect("id").to_owned()
    }
}
