//! The HTTP client of the API-talking CLI verbs (`sandboxd sandbox …`, `sandboxd
//! templates …`): a server URL and key from flags or `SANDBOXD_URL`/`SANDBOXD_KEY`,
//! one HTTP/1.1 exchange per call, JSON answers or NDJSON lines as they arrive.

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// Where the server is and which key to use.
#[derive(Args, Clone)]
pub struct Target {
    /// Server base URL (http only).
    #[arg(long, env = "SANDBOXD_URL", default_value = "http://127.0.0.1:7420")]
    pub url: String,
    /// API key (`or_…`, `vl_…`, `sbx_…`, or the master key).
    #[arg(long, env = "SANDBOXD_KEY", hide_env_values = true)]
    pub key: String,
    /// Print the server's JSON instead of the human summary.
    #[arg(long)]
    pub json: bool,
}

/// An answer: status and body (whole for JSON, streamed for NDJSON).
pub struct Answer {
    pub status: u16,
    pub resp: Response<Incoming>,
}

impl Target {
    /// Sends one request; `ndjson` asks for a stream.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        ndjson: bool,
        headers: &[(&str, String)],
    ) -> Result<Answer> {
        let uri: hyper::Uri = format!("{}{path}", self.url.trim_end_matches('/'))
            .parse()
            .context("invalid --url")?;
        if uri.scheme_str() != Some("http") {
            bail!("--url must be an http:// URL");
        }
        let host = uri.host().context("--url needs a host")?.to_owned();
        let port = uri.port_u16().unwrap_or(80);
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .with_context(|| format!("cannot connect to {}", self.url))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let mut req = Request::builder()
            .method(method)
            .uri(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
            .header("host", format!("{host}:{port}"))
            .header("authorization", format!("Bearer {}", self.key))
            .header(
                "accept",
                if ndjson {
                    "application/x-ndjson"
                } else {
                    "application/json"
                },
            );
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        for (name, value) in headers {
            req = req.header(*name, value.as_str());
        }
        let resp = sender
            .send_request(req.body(Full::new(Bytes::from(payload)))?)
            .await?;
        Ok(Answer {
            status: resp.status().as_u16(),
            resp,
        })
    }

    /// A JSON request whose 2xx answer is returned; an error answer becomes the error.
    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let answer = self.send(method, path, body, false, &[]).await?;
        let status = answer.status;
        let bytes = answer.resp.into_body().collect().await?.to_bytes();
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            bail!("{}", describe_error(status, &value));
        }
        Ok(value)
    }
}

/// `HTTP 403 PERMISSION_DENIED: message`.
pub fn describe_error(status: u16, v: &Value) -> String {
    format!(
        "HTTP {status} {}: {}",
        v["code"].as_str().unwrap_or("ERROR"),
        v["error"].as_str().unwrap_or("(no message)")
    )
}

impl Answer {
    /// Calls `each` with every NDJSON line as it arrives.
    pub async fn lines(self, mut each: impl FnMut(Value)) -> Result<()> {
        let mut body = self.resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                buf.extend_from_slice(&data);
                while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    if let Ok(v) = serde_json::from_slice(&line) {
                        each(v);
                    }
                }
            }
        }
        Ok(())
    }

    pub async fn json(self) -> Result<Value> {
        let bytes = self.resp.into_body().collect().await?.to_bytes();
        Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}
