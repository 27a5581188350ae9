//! A hostile registry's answers are read only up to a fixed cap (REVIEW12 #6): an
//! endless manifest, a manifest declaring a huge `Content-Length`, an endless token
//! answer, and a manifest of too many layers are refused with an error, and the pull
//! stops reading. With basic credentials, a registry that later answers with a bearer
//! challenge cannot have oci-client read an endless token answer (REVIEW13 #5). The
//! registry is a test-local HTTP listener on 127.0.0.1.

use sandboxd_images::{Credential, Images, PullOptions};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the fake registry sends after `/v2/`.
#[derive(Clone, Copy)]
enum Answer {
    /// A manifest body without a length that never ends (until `STOP` bytes).
    EndlessManifest,
    /// A `Content-Length` of 1 GiB (the body never comes).
    HugeLength,
    /// A bearer challenge whose token answer never ends.
    EndlessToken,
    /// A valid manifest listing 2,000 layers (well under the size cap).
    ManyLayers,
    /// HTTP basic to the first `/v2/` ping, then a bearer challenge whose token answer
    /// never ends; an image of no layers (its configuration served to basic requests).
    BasicThenEndlessToken,
}

/// `/v2/` pings the fake registry answered.
static PINGS: AtomicU64 = AtomicU64::new(0);

/// The configuration of [`Answer::BasicThenEndlessToken`]'s image.
const CONFIG: &str =
    r#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#;

fn config_digest() -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(CONFIG.as_bytes())))
}

/// Where the fake registry gives up sending (old code reads all of it).
const STOP: u64 = 256 << 20;

/// Serves `answer` on a loopback port; counts the body bytes it managed to send.
fn serve(answer: Answer) -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    respond(&mut conn, &path, answer, port, &counter);
                }
            });
        }
    });
    (port, sent)
}

fn respond(
    conn: &mut std::net::TcpStream,
    path: &str,
    answer: Answer,
    port: u16,
    sent: &AtomicU64,
) {
    let endless = |conn: &mut std::net::TcpStream, head: &str| {
        let _ = conn.write_all(head.as_bytes());
        let _ = conn.write_all(b"{\"schemaVersion\":2,\"x\":\"");
        let chunk = vec![b' '; 1 << 16];
        while sent.load(Ordering::SeqCst) < STOP {
            if conn.write_all(&chunk).is_err() {
                return;
            }
            sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
        }
        let _ = conn.shutdown(std::net::Shutdown::Both);
    };
    match (path, answer) {
        ("/v2/", Answer::BasicThenEndlessToken) if PINGS.fetch_add(1, Ordering::SeqCst) == 0 => {
            let _ = conn.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nWWW-Authenticate: Basic realm=\"r\"\r\n\r\n",
            );
        }
        ("/v2/", Answer::BasicThenEndlessToken) | ("/v2/", Answer::EndlessToken) => {
            let _ = write!(
                conn,
                "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nWWW-Authenticate: Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"t\"\r\n\r\n"
            );
        }
        ("/v2/", _) => {
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
        (p, Answer::BasicThenEndlessToken) if p.starts_with("/token") => endless(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
        ),
        (p, Answer::BasicThenEndlessToken) => {
            let body = match p.contains("/manifests/") {
                true => serde_json::json!({
                    "schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               "digest": config_digest(), "size": CONFIG.len()},
                    "layers": [],
                })
                .to_string(),
                false => CONFIG.to_owned(),
            };
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
        (p, Answer::EndlessToken) => match p.starts_with("/token") {
            true => endless(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
            ),
            false => {
                let _ = conn.write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n");
            }
        },
        (_, Answer::EndlessManifest) => endless(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nConnection: close\r\n\r\n",
        ),
        (_, Answer::HugeLength) => {
            let _ = conn.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: 1073741824\r\n\r\n{",
            );
            // Then nothing: a client that waits for the body waits until the test ends.
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
        (_, Answer::ManyLayers) => {
            let layer = serde_json::json!({
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": format!("sha256:{}", "0".repeat(64)), "size": 1,
            });
            let body = serde_json::json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": format!("sha256:{}", "1".repeat(64)), "size": 2},
                "layers": vec![layer; 2_000],
            })
            .to_string();
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    }
}

/// Pulls `reference` with `options` into a fresh data dir.
fn pull_with(
    reference: &str,
    options: &PullOptions,
) -> Result<sandboxd_runtime::ImageLayers, sandboxd_images::ImageError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let images = Arc::new(Images::open(&dir.path().join("data")).expect("open"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(sandboxd_images::pull::pull(images, reference, options))
}

/// Pulls from the fake registry; the error's text.
fn pull(port: u16) -> String {
    let reference = format!("127.0.0.1:{port}/bomb/x:1");
    match pull_with(&reference, &PullOptions::default()) {
        Ok(_) => panic!("a hostile registry's image was pulled"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn an_endless_manifest_is_refused_at_the_cap() {
    let (port, sent) = serve(Answer::EndlessManifest);
    let text = pull(port);
    assert!(text.contains("manifest is larger than"), "{text}");
    let sent = sent.load(Ordering::SeqCst);
    assert!(
        sent < 64 << 20,
        "the pull stopped reading near the 4 MiB cap, not after {} MiB",
        sent >> 20
    );
}

#[test]
fn a_huge_declared_manifest_is_refused_before_its_body() {
    let (port, _) = serve(Answer::HugeLength);
    let text = pull(port);
    assert!(text.contains("manifest is larger than"), "{text}");
}

#[test]
fn an_endless_token_answer_is_refused_at_the_cap() {
    let (port, sent) = serve(Answer::EndlessToken);
    let text = pull(port);
    assert!(text.contains("token answer is larger than"), "{text}");
    let sent = sent.load(Ordering::SeqCst);
    assert!(sent < 64 << 20, "read {} MiB of a token answer", sent >> 20);
}

#[test]
fn a_manifest_of_too_many_layers_is_refused() {
    let (port, _) = serve(Answer::ManyLayers);
    let text = pull(port);
    assert!(text.contains("layers (at most"), "{text}");
}

#[test]
fn basic_credentials_never_let_a_token_answer_be_read_whole() {
    let (port, sent) = serve(Answer::BasicThenEndlessToken);
    let mut options = PullOptions::default();
    options.credentials.insert(
        format!("127.0.0.1:{port}"),
        Credential::Basic {
            username: "u".into(),
            password: "p".into(),
        },
    );
    let pulled = pull_with(&format!("127.0.0.1:{port}/basic/x:1"), &options);
    let sent = sent.load(Ordering::SeqCst);
    assert!(sent < 64 << 20, "read {} MiB of a token answer", sent >> 20);
    let image = pulled.expect("pulled with HTTP basic");
    assert_eq!(image.layers.len(), 1, "the mount-point layer only");
}
