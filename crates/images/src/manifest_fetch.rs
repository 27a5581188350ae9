//! Bounded registry answers: the manifest (and a multi-platform index) and the token
//! endpoint's answer are fetched with requests of sandboxd's own, each body refused
//! past [`MAX_ANSWER`] (a `Content-Length` above it before reading, a stream stopped
//! once it passes it), so a hostile registry cannot grow the pulling process's memory.
//! `oci-client` reads these whole (`res.bytes()`); it is left only blob streams, and
//! only with a bearer token found here or none at all: given HTTP basic credentials (or
//! anonymous access) it would ask the registry for a challenge again and follow it to a
//! token server whose answer it reads whole, so those blobs come by requests of ours.

use crate::platform::Unmatched;
use crate::pull::Credential;
use crate::ImageError;
use oci_client::manifest::{OciImageIndex, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::Reference;
use reqwest::header::{ACCEPT, CONTENT_LENGTH, WWW_AUTHENTICATE};
use sha2::{Digest, Sha256};

/// The largest manifest, index or token answer read (the distribution spec's manifests
/// are a few KiB; registries refuse above 4 MiB).
pub const MAX_ANSWER: u64 = 4 << 20;

/// The most layers an image may have: the most lower dirs one overlay stacks (the
/// kernel's `OVL_MAX_STACK`).
pub const MAX_LAYERS: usize = 500;

const ACCEPTED: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Requests to one registry, with the access the pull found.
pub struct Registry {
    http: reqwest::Client,
    base: String,
    registry: String,
    access: Access,
    /// What `oci-client` is given for the blobs.
    pub auth: RegistryAuth,
}

/// How manifest requests authenticate.
enum Access {
    None,
    Bearer(String),
    Basic(String, String),
}

/// An image manifest and its digest, and the index's digest when it came from one.
pub struct Found {
    pub manifest: OciImageManifest,
    pub digest: String,
    pub list_digest: Option<String>,
}

fn failed(registry: &str, message: impl std::fmt::Display) -> ImageError {
    ImageError::Registry {
        registry: registry.to_owned(),
        message: message.to_string(),
    }
}

/// Reads `res`'s body, refused past [`MAX_ANSWER`] bytes.
async fn bounded(
    registry: &str,
    what: &str,
    mut res: reqwest::Response,
) -> Result<Vec<u8>, ImageError> {
    let too_large = || {
        failed(
            registry,
            format!("its {what} is larger than {MAX_ANSWER} bytes: refused"),
        )
    };
    let declared = res
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_ANSWER) {
        return Err(too_large());
    }
    let mut out = Vec::new();
    while let Some(chunk) = res
        .chunk()
        .await
        .map_err(|e| failed(registry, format!("reading its {what}: {e}")))?
    {
        if out.len() as u64 + chunk.len() as u64 > MAX_ANSWER {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// `key="value"` pairs of a `Bearer` challenge (`realm`, `service`…).
fn challenge_params(header: &str) -> Option<Vec<(String, String)>> {
    let rest = header.trim().strip_prefix("Bearer ")?;
    let mut out = Vec::new();
    let mut s = rest.trim();
    while !s.is_empty() {
        let (key, after) = s.split_once('=')?;
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, tail) = match after.strip_prefix('"') {
            Some(q) => {
                let end = q.find('"')?;
                (q[..end].to_owned(), &q[end + 1..])
            }
            None => match after.find(',') {
                Some(i) => (after[..i].trim().to_owned(), &after[i..]),
                None => (after.trim().to_owned(), ""),
            },
        };
        out.push((key, value));
        s = tail.trim_start().trim_start_matches(',').trim_start();
    }
    Some(out)
}

#[derive(serde::Deserialize)]
struct TokenAnswer {
    token: Option<String>,
    access_token: Option<String>,
}

impl Registry {
    /// Finds the access to `reference`'s repository: the stored bearer token as it is,
    /// or the registry's challenge followed (a token from its realm, with the basic
    /// credential when there is one; or basic auth; or none).
    pub async fn connect(
        reference: &Reference,
        plain: bool,
        credential: Option<&Credential>,
    ) -> Result<Registry, ImageError> {
        let registry = reference.resolve_registry().to_owned();
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .read_timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| failed(&registry, e))?;
        let scheme = if plain { "http" } else { "https" };
        let base = format!("{scheme}://{registry}");
        let mut this = Registry {
            http,
            base,
            registry,
            access: Access::None,
            auth: RegistryAuth::Anonymous,
        };
        if let Some(Credential::Token(token)) = credential {
            this.access = Access::Bearer(token.clone());
            this.auth = RegistryAuth::Bearer(token.clone());
            return Ok(this);
        }
        let basic = match credential {
            Some(Credential::Basic { username, password }) => Some((username, password)),
            _ => None,
        };
        let res = this
            .http
            .get(format!("{}/v2/", this.base))
            .send()
            .await
            .map_err(|e| failed(&this.registry, e))?;
        let header = res
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        drop(res); // its body is never read
        let Some(header) = header else {
            return Ok(this);
        };
        let Some(params) = challenge_params(&header) else {
            // Not a bearer challenge: HTTP basic with the credential, if any.
            if let Some((u, p)) = basic {
                this.auth = RegistryAuth::Basic(u.clone(), p.clone());
                this.access = Access::Basic(u.clone(), p.clone());
            }
            return Ok(this);
        };
        let get = |k: &str| {
            params
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let realm = get("realm")
            .ok_or_else(|| failed(&this.registry, "a bearer challenge without a realm"))?;
        let mut query = vec![(
            "scope".to_owned(),
            format!("repository:{}:pull", reference.repository()),
        )];
        if let Some(service) = get("service") {
            query.push(("service".to_owned(), service));
        }
        let mut req = this.http.get(&realm).query(&query);
        if let Some((u, p)) = basic {
            req = req.basic_auth(u, Some(p));
        }
        let res = req.send().await.map_err(|e| failed(&this.registry, e))?;
        let status = res.status();
        let body = bounded(&this.registry, "token answer", res).await?;
        if !status.is_success() {
            return Err(ImageError::Unauthorized {
                registry: this.registry.clone(),
                message: format!(
                    "the token server answered {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(512)])
                ),
            });
        }
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|e| failed(&this.registry, format!("its token answer: {e}")))?;
        let token = answer
            .token
            .or(answer.access_token)
            .ok_or_else(|| failed(&this.registry, "its token answer has no token"))?;
        this.access = Access::Bearer(token.clone());
        this.auth = RegistryAuth::Bearer(token);
        Ok(this)
    }

    /// The manifest at `reference` (its tag or digest; a multi-platform index resolved
    /// to this host's image with `unmatched`'s resolver), each answer bounded and its
    /// digest checked.
    pub async fn manifest(
        &self,
        reference: &Reference,
        unmatched: &Unmatched,
    ) -> Result<Found, ImageError> {
        let target = reference
            .digest()
            .map(str::to_owned)
            .unwrap_or_else(|| reference.tag().unwrap_or("latest").to_owned());
        let (body, digest) = self.raw(reference, &target).await?;
        let value: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| ImageError::Malformed(format!("image manifest: {e}")))?;
        let is_index = value.get("manifests").is_some();
        if !is_index {
            return Ok(Found {
                manifest: parse_manifest(&body)?,
                digest,
                list_digest: None,
            });
        }
        let index: OciImageIndex = serde_json::from_slice(&body)
            .map_err(|e| ImageError::Malformed(format!("image index: {e}")))?;
        let pick = (unmatched.resolver())(&index.manifests).ok_or_else(|| {
            ImageError::Unsupported("no image for this host's platform in the index".into())
        })?;
        let (body, picked) = self.raw(reference, &pick).await?;
        if picked != pick {
            return Err(ImageError::DigestMismatch {
                digest: pick,
                actual: picked,
            });
        }
        Ok(Found {
            manifest: parse_manifest(&body)?,
            digest: picked,
            list_digest: Some(digest),
        })
    }

    /// One manifest answer for `target` (a tag or a digest) and its sha256 digest
    /// (checked against `target` when it is a digest).
    async fn raw(
        &self,
        reference: &Reference,
        target: &str,
    ) -> Result<(Vec<u8>, String), ImageError> {
        let url = v2_url(&self.base, reference, "manifests", target);
        let mut req = self.http.get(&url).header(ACCEPT, ACCEPTED.join(", "));
        req = match &self.access {
            Access::None => req,
            Access::Bearer(token) => req.bearer_auth(token),
            Access::Basic(u, p) => req.basic_auth(u, Some(p)),
        };
        let res = req.send().await.map_err(|e| failed(&self.registry, e))?;
        let status = res.status();
        let body = bounded(&self.registry, "manifest", res).await?;
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(ImageError::Unauthorized {
                registry: self.registry.clone(),
                message: format!("{status} for {url}"),
            });
        }
        if !status.is_success() {
            return Err(failed(
                &self.registry,
                format!(
                    "{status} for {url}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(512)])
                ),
            ));
        }
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
        if target.starts_with("sha256:") && target != digest {
            return Err(ImageError::DigestMismatch {
                digest: target.to_owned(),
                actual: digest,
            });
        }
        Ok((body, digest))
    }
}

/// The URL of `reference`'s manifest or blob (`kind`) `target` at `base`; through a
/// mirror, with the `ns=` parameter naming the registry mirrored (as oci-client's own
/// URLs have it).
fn v2_url(base: &str, reference: &Reference, kind: &str, target: &str) -> String {
    let ns = reference
        .namespace()
        .map(|ns| format!("?ns={ns}"))
        .unwrap_or_default();
    format!("{base}/v2/{}/{kind}/{target}{ns}", reference.repository())
}

/// A blob's bytes as they come.
pub type BlobStream = futures_util::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>;

impl Registry {
    /// With HTTP basic access, blob `digest` of `reference`'s repository by a request of
    /// ours (its stream; the caller bounds it by the descriptor's size); `None` with any
    /// other access (oci-client's own request, which then never asks a token server).
    pub async fn basic_blob(
        &self,
        reference: &Reference,
        digest: &str,
    ) -> Result<Option<BlobStream>, ImageError> {
        let Access::Basic(u, p) = &self.access else {
            return Ok(None);
        };
        let url = v2_url(&self.base, reference, "blobs", digest);
        // A redirect to another host (blob storage) drops the credential (reqwest
        // leaves sensitive headers out across hosts).
        let res = self
            .http
            .get(&url)
            .basic_auth(u, Some(p))
            .send()
            .await
            .map_err(|e| failed(&self.registry, e))?;
        let status = res.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(ImageError::Unauthorized {
                registry: self.registry.clone(),
                message: format!("{status} for {url}"),
            });
        }
        if !status.is_success() {
            return Err(failed(&self.registry, format!("{status} for {url}")));
        }
        let stream = futures_util::stream::unfold(Some(res), |res| async move {
            let mut res = res?;
            match res.chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), Some(res))),
                Ok(None) => None,
                Err(e) => Some((Err(std::io::Error::other(e)), None)),
            }
        });
        Ok(Some(Box::pin(stream)))
    }
}

fn parse_manifest(body: &[u8]) -> Result<OciImageManifest, ImageError> {
    let manifest: OciImageManifest = serde_json::from_slice(body)
        .map_err(|e| ImageError::Malformed(format!("image manifest: {e}")))?;
    check_layer_count(manifest.layers.len())?;
    Ok(manifest)
}

/// Refuses an image of more layers than an overlay stacks ([`MAX_LAYERS`]): pulled or
/// imported alike, since such an image could never start.
pub(crate) fn check_layer_count(layers: usize) -> Result<(), ImageError> {
    if layers > MAX_LAYERS {
        return Err(ImageError::Unsupported(format!(
            "an image of {layers} layers (at most {MAX_LAYERS})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirrors_urls_name_the_registry_mirrored() {
        let mut r: Reference = "registry.example/team/app:1".parse().expect("reference");
        assert_eq!(
            v2_url("https://registry.example", &r, "manifests", "1"),
            "https://registry.example/v2/team/app/manifests/1"
        );
        r.set_mirror_registry("mirror.example".to_owned());
        assert_eq!(
            v2_url("https://mirror.example", &r, "blobs", "sha256:ab"),
            "https://mirror.example/v2/team/app/blobs/sha256:ab?ns=registry.example"
        );
    }

    #[test]
    fn bearer_challenges_parse() {
        let p = challenge_params(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a:pull""#,
        )
        .expect("bearer");
        assert_eq!(p[0], ("realm".into(), "https://auth.example/token".into()));
        assert_eq!(p[1], ("service".into(), "registry.example".into()));
        assert_eq!(p.len(), 3);
        assert!(challenge_params(r#"Basic realm="x""#).is_none());
    }
}
