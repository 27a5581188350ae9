//! Pulls from OCI registries (the distribution spec, Docker Hub's conventions) with
//! `oci-client`: anonymous, basic or bearer-token access (the client follows the
//! challenge, with the registry's stored credential when there is one),
//! a multi-platform index resolved to the host's platform, plain HTTP only to loopback
//! registries and those listed as insecure. Every blob is hashed while it streams into
//! a scratch file and refused unless it matches its descriptor's digest and size; only
//! then is it unpacked.

use crate::manifest_fetch;
use crate::platform::{self, Unmatched};
use crate::reference::{self, plain_http};
use crate::store::{image_config, Images};
use crate::unpack::Budget;
use crate::{io, sha256_hex, ImageError};
use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sandboxd_runtime::ImageLayers;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::sync::Arc;

/// Largest image configuration accepted.
const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// Layer media types sandboxd unpacks (tar, gzip and zstd; OCI and Docker names).
const LAYER_TYPES: [&str; 6] = [
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.zstd",
];

/// How to reach registries.
#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// Registries (`host[:port]`) spoken to over plain HTTP although not on loopback.
    pub insecure_registries: Vec<String>,
    /// Credentials by registry (`host[:port]`, as in the reference; Docker Hub's is
    /// `docker.io`); a registry without one is accessed anonymously.
    pub credentials: std::collections::BTreeMap<String, Credential>,
}

/// A stored registry credential.
#[derive(Clone)]
pub enum Credential {
    /// User name and password (HTTP basic, or exchanged for a bearer token).
    Basic { username: String, password: String },
    /// A bearer token sent as it is.
    Token(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Basic { username, .. } => write!(f, "Basic({username}, <redacted>)"),
            Credential::Token(_) => write!(f, "Token(<redacted>)"),
        }
    }
}

/// A failure while a blob streams.
fn transfer_error(reference: &Reference, e: impl std::fmt::Display) -> ImageError {
    ImageError::Registry {
        registry: reference.registry().to_owned(),
        message: e.to_string(),
    }
}

/// A blob's download that ended (an error or the end of the stream) after `got` of
/// its `size` bytes; the message has `e`'s causes too (a transport error's own text
/// rarely says what happened).
fn interrupted(
    reference: &Reference,
    desc: &OciDescriptor,
    got: u64,
    size: u64,
    e: &(dyn std::error::Error + 'static),
) -> ImageError {
    ImageError::Interrupted {
        registry: reference.registry().to_owned(),
        digest: desc.digest.clone(),
        got,
        size,
        message: with_causes(e),
    }
}

/// `e`'s text followed by its causes', each once: a wrapper that quotes its cause
/// (oci-client's digest error does) does not have it said twice.
fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        cause = c.source();
    }
    message
}

/// A registry's answer; a refusal of access is [`ImageError::Unauthorized`].
fn registry_error(
    reference: &Reference,
    e: oci_client::errors::OciDistributionError,
) -> ImageError {
    use oci_client::errors::OciDistributionError as E;
    let registry = reference.registry().to_owned();
    let refused = match &e {
        E::AuthenticationFailure(_) | E::UnauthorizedError { .. } => true,
        E::RegistryError { envelope, .. } => envelope.errors.iter().any(|x| {
            matches!(
                x.code,
                oci_client::errors::OciErrorCode::Unauthorized
                    | oci_client::errors::OciErrorCode::Denied
            )
        }),
        E::ServerError { code, .. } => *code == 401,
        _ => false,
    };
    match refused {
        true => ImageError::Unauthorized {
            registry,
            message: e.to_string(),
        },
        false => ImageError::Registry {
            registry,
            message: e.to_string(),
        },
    }
}

fn client(reference: &Reference, options: &PullOptions, unmatched: &Unmatched) -> Client {
    let registry = reference.resolve_registry().to_owned();
    let mut plain: Vec<String> = options.insecure_registries.clone();
    if plain_http(&registry, &options.insecure_registries) {
        plain.push(registry);
    }
    Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(plain),
        platform_resolver: Some(unmatched.resolver()),
        connect_timeout: Some(std::time::Duration::from_secs(10)),
        read_timeout: Some(std::time::Duration::from_secs(60)),
        ..Default::default()
    })
}

/// Installs the TLS crypto provider once per process.
fn tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Pulls `text` into `images` and records it under its full reference.
pub async fn pull(
    images: Arc<Images>,
    text: &str,
    options: &PullOptions,
) -> Result<ImageLayers, ImageError> {
    tls_provider();
    let reference = reference::parse(text)?;
    let unmatched = Unmatched::default();
    let client = client(&reference, options, &unmatched);
    // The manifest and the token answer come through bounded requests of our own;
    // oci-client gets the access they found, for the blobs only.
    let plain = plain_http(reference.resolve_registry(), &options.insecure_registries);
    let credential = options
        .credentials
        .get(reference.registry())
        .or_else(|| options.credentials.get(reference.resolve_registry()));
    let registry = manifest_fetch::Registry::connect(&reference, plain, credential).await?;
    // Only a bearer token is handed over: with anything stored oci-client asks the
    // registry for a challenge itself and reads a token server's answer whole (with
    // basic access, blobs come by `basic_blob`; with none, it needs nothing).
    if let RegistryAuth::Bearer(_) = &registry.auth {
        client
            .store_auth_if_needed(reference.resolve_registry(), &registry.auth)
            .await;
    }
    let found = registry
        .manifest(&reference, &unmatched)
        .await
        .map_err(|e| match unmatched.offered() {
            Some(offered) => ImageError::Unsupported(format!(
                "{text} is a multi-platform image with no image for this host's platform \
                 {} (it has {})",
                platform::host(),
                match offered.is_empty() {
                    true => "none named".to_owned(),
                    false => offered.join(", "),
                }
            )),
            None => e,
        })?;
    let (manifest, digest, list_digest) = (found.manifest, found.digest, found.list_digest);
    if let Some(pinned) = reference.digest() {
        if pinned != digest && Some(pinned) != list_digest.as_deref() {
            return Err(ImageError::DigestMismatch {
                digest: pinned.to_owned(),
                actual: digest,
            });
        }
    }
    if manifest.config.size as u64 > MAX_CONFIG_BYTES {
        return Err(ImageError::Malformed(
            "image configuration too large".into(),
        ));
    }
    let config_bytes = fetch_small(&client, &registry, &reference, &manifest.config).await?;
    let mut config = image_config(&config_bytes)?;
    config.manifest_digest = Some(digest);
    let mut layers = Vec::with_capacity(manifest.layers.len());
    let mut budget = images.image_budget()?;
    for desc in &manifest.layers {
        if !LAYER_TYPES.contains(&desc.media_type.as_str()) {
            return Err(ImageError::Unsupported(format!(
                "layer {} has media type {}",
                desc.digest, desc.media_type
            )));
        }
        let (layer, left) =
            fetch_layer(&images, &client, &registry, &reference, desc, budget).await?;
        budget = left;
        layers.push(layer);
    }
    let name = reference::stored_name(&reference);
    let images2 = images.clone();
    tokio::task::spawn_blocking(move || images2.save_image(&name, layers, config))
        .await
        .map_err(|e| ImageError::Malformed(format!("saving the image: {e}")))?
}

/// Blob `desc` as it comes: by oci-client, or with HTTP basic access by a request of
/// ours (see `manifest_fetch`).
async fn blob_stream(
    client: &Client,
    registry: &manifest_fetch::Registry,
    reference: &Reference,
    desc: &OciDescriptor,
) -> Result<manifest_fetch::BlobStream, ImageError> {
    if let Some(stream) = registry.basic_blob(reference, &desc.digest).await? {
        return Ok(stream);
    }
    let sized = client
        .pull_blob_stream(reference, desc)
        .await
        .map_err(|e| registry_error(reference, e))?;
    Ok(sized.stream)
}

/// A small blob (the configuration) into memory, verified.
async fn fetch_small(
    client: &Client,
    registry: &manifest_fetch::Registry,
    reference: &Reference,
    desc: &OciDescriptor,
) -> Result<Vec<u8>, ImageError> {
    let expected = sha256_hex(&desc.digest)?.to_owned();
    let mut stream = blob_stream(client, registry, reference, desc).await?;
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| transfer_error(reference, e))?;
        out.extend_from_slice(&chunk);
        if out.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ImageError::Malformed(
                "image configuration too large".into(),
            ));
        }
    }
    let actual = hex::encode(Sha256::digest(&out));
    if actual != expected {
        return Err(ImageError::DigestMismatch {
            digest: desc.digest.clone(),
            actual,
        });
    }
    Ok(out)
}

/// A layer blob: stored already, or downloaded once (under the blob's lock), verified
/// and unpacked.
async fn fetch_layer(
    images: &Arc<Images>,
    client: &Client,
    registry: &manifest_fetch::Registry,
    reference: &Reference,
    desc: &OciDescriptor,
    mut budget: Budget,
) -> Result<(String, Budget), ImageError> {
    if let Some(layer) = images.layer_for_blob(&desc.digest)? {
        return Ok((layer, budget));
    }
    let (imgs, digest) = (images.clone(), desc.digest.clone());
    let lock = tokio::task::spawn_blocking(move || imgs.lock_blob(&digest))
        .await
        .map_err(|e| ImageError::Malformed(format!("locking a blob: {e}")))??;
    if let Some(layer) = images.layer_for_blob(&desc.digest)? {
        return Ok((layer, budget));
    }
    let expected = sha256_hex(&desc.digest)?.to_owned();
    let size = u64::try_from(desc.size).unwrap_or(0);
    // The declared size bounds the download (more is refused as it streams).
    images.admit_blob(&mut budget, &desc.digest, size)?;
    let (mut file, temp) = images.temp_file()?;
    let mut stream = blob_stream(client, registry, reference, desc).await?;
    let mut hasher = Sha256::new();
    let mut got = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            // Every byte came and the client's own check refused them.
            Err(_) if got == size => {
                return Err(ImageError::DigestMismatch {
                    digest: desc.digest.clone(),
                    actual: hex::encode(hasher.finalize()),
                })
            }
            Err(e) => return Err(interrupted(reference, desc, got, size, &e)),
        };
        got += chunk.len() as u64;
        if got > size {
            return Err(ImageError::BlobTooLarge {
                digest: desc.digest.clone(),
                size,
            });
        }
        hasher.update(&chunk);
        file.write_all(&chunk)
            .map_err(io("writing a download", &temp.path))?;
    }
    if got < size {
        return Err(interrupted(
            reference,
            desc,
            got,
            size,
            &std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the connection ended early",
            ),
        ));
    }
    let actual = hex::encode(hasher.finalize());
    if actual != expected {
        return Err(ImageError::DigestMismatch {
            digest: desc.digest.clone(),
            actual,
        });
    }
    drop(file);
    let (imgs, digest) = (images.clone(), desc.digest.clone());
    let layer = tokio::task::spawn_blocking(move || {
        let layer = imgs.ingest_blob(&digest, &temp.path, &mut budget);
        drop(temp);
        drop(lock);
        layer.map(|l| (l, budget))
    })
    .await
    .map_err(|e| ImageError::Malformed(format!("unpacking a layer: {e}")))??;
    Ok(layer)
}

#[cfg(test)]
mod cause_tests {
    use super::with_causes;
    use oci_client::errors::{DigestError, OciDistributionError};

    #[test]
    fn a_cause_the_error_quotes_is_said_once() {
        let e = OciDistributionError::DigestError(DigestError::VerificationError {
            expected: "sha256:aaaa".into(),
            actual: "sha256:bbbb".into(),
        });
        let message = with_causes(&e);
        assert_eq!(message.matches("sha256:aaaa").count(), 1, "{message}");
        assert!(message.contains("sha256:bbbb"), "{message}");
        // A wrapper that does not quote its cause has it added.
        #[derive(Debug)]
        struct Wrapper(std::io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the download broke off")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        assert_eq!(
            with_causes(&Wrapper(reset)),
            "the download broke off: reset by peer"
        );
    }
}
