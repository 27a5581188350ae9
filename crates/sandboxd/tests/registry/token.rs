//! A token server for the bearer-token challenge flow (the Docker distribution "token"
//! auth): a small axum server on loopback issuing ES256 JWTs signed with a key made for
//! the test, whose self-signed certificate the registry trusts (`rootcertbundle`) and
//! that each token carries in its `x5c` header. With the right Basic credentials a
//! client gets every action it asks for; anonymous clients get `pull` of repositories
//! under `public/` only (as Docker Hub does for public images); wrong credentials 401.

#![allow(dead_code)]

use super::run;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

pub const ISSUER: &str = "sandboxd-test-issuer";
pub const SERVICE: &str = "sandboxd-test-registry";

struct Issuer {
    key: EcdsaKeyPair,
    cert_der: Vec<u8>,
    user: String,
    password: String,
    /// Each request's `(user or "", scope)`, in order.
    seen: Mutex<Vec<(String, String)>>,
}

/// The running token server; stops when dropped.
pub struct TokenServer {
    pub port: u16,
    /// The PEM certificate the registry must trust.
    pub cert: PathBuf,
    issuer: Arc<Issuer>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl TokenServer {
    /// Makes a P-256 key and its self-signed certificate in `dir` (with `openssl`) and
    /// serves tokens for `user`/`password`.
    pub fn start(dir: &Path, user: &str, password: &str) -> TokenServer {
        let key_pem = dir.join("token-key.pem");
        let cert = dir.join("token-cert.pem");
        let (p8, der) = (dir.join("token-key.p8"), dir.join("token-cert.der"));
        let s = |p: &Path| p.to_str().expect("utf-8 path").to_owned();
        run(Command::new("openssl").args([
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            &s(&key_pem),
        ]));
        run(Command::new("openssl").args([
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            &s(&key_pem),
            "-outform",
            "DER",
            "-out",
            &s(&p8),
        ]));
        run(Command::new("openssl").args([
            "req",
            "-new",
            "-x509",
            "-key",
            &s(&key_pem),
            "-out",
            &s(&cert),
            "-days",
            "2",
            "-subj",
            "/CN=sandboxd test token issuer",
        ]));
        run(Command::new("openssl").args([
            "x509",
            "-in",
            &s(&cert),
            "-outform",
            "DER",
            "-out",
            &s(&der),
        ]));
        let rng = ring::rand::SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &std::fs::read(&p8).expect("key"),
            &rng,
        )
        .expect("a P-256 PKCS#8 key");
        let issuer = Arc::new(Issuer {
            key,
            cert_der: std::fs::read(&der).expect("cert"),
            user: user.to_owned(),
            password: password.to_owned(),
            seen: Mutex::new(Vec::new()),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = issuer.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let app = axum::Router::new()
                    .route("/token", axum::routing::get(token))
                    .with_state(state);
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        TokenServer {
            port,
            cert,
            issuer,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn realm(&self) -> String {
        format!("http://127.0.0.1:{}/token", self.port)
    }

    /// Each token request's `(user or "", scope)`, in order.
    pub fn seen(&self) -> Vec<(String, String)> {
        self.issuer.seen.lock().expect("lock").clone()
    }
}

/// `GET /token?service=…&scope=repository:NAME:ACTIONS…`.
async fn token(
    State(issuer): State<Arc<Issuer>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let user = match basic_user(&headers) {
        Some((u, p)) if u == issuer.user && p == issuer.password => Some(u),
        Some(_) => return (StatusCode::UNAUTHORIZED, "bad credentials").into_response(),
        None => None,
    };
    let scope = query.get("scope").cloned().unwrap_or_default();
    if let Ok(mut seen) = issuer.seen.lock() {
        seen.push((user.clone().unwrap_or_default(), scope.clone()));
    }
    if query.get("service").map(String::as_str) != Some(SERVICE) {
        return (StatusCode::BAD_REQUEST, "unknown service").into_response();
    }
    // `repository:team/app:pull,push` (several scopes are separate parameters in
    // theory; one is all our clients ask at a time).
    let mut access = Vec::new();
    let mut parts = scope.splitn(3, ':');
    if let (Some("repository"), Some(name), Some(actions)) =
        (parts.next(), parts.next(), parts.next())
    {
        let granted: Vec<&str> = actions
            .split(',')
            .filter(|a| user.is_some() || (*a == "pull" && name.starts_with("public/")))
            .collect();
        access.push(serde_json::json!({"type": "repository", "name": name, "actions": granted}));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = serde_json::json!({
        "typ": "JWT",
        "alg": "ES256",
        "x5c": [base64::engine::general_purpose::STANDARD.encode(&issuer.cert_der)],
    });
    let claims = serde_json::json!({
        "iss": ISSUER,
        "sub": user.clone().unwrap_or_default(),
        "aud": SERVICE,
        "exp": now + 300,
        "nbf": now - 10,
        "iat": now,
        "jti": uuid::Uuid::new_v4().to_string(),
        "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        b64.encode(header.to_string()),
        b64.encode(claims.to_string())
    );
    let rng = ring::rand::SystemRandom::new();
    let signature = issuer
        .key
        .sign(&rng, signing_input.as_bytes())
        .expect("signing");
    let jwt = format!("{signing_input}.{}", b64.encode(signature.as_ref()));
    axum::Json(serde_json::json!({
        "token": jwt,
        "access_token": jwt,
        "expires_in": 300,
    }))
    .into_response()
}

/// The user and password of a `Basic` authorization header.
fn basic_user(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}
