//! Image references and which registries are spoken to over plain HTTP.

use crate::ImageError;
use oci_client::Reference;
use std::net::IpAddr;

/// Parses `name:tag`, `host:port/team/app:1.4`, `…@sha256:…` (Docker Hub's short forms
/// normalized to `docker.io/library/…`).
pub fn parse(text: &str) -> Result<Reference, ImageError> {
    text.parse::<Reference>()
        .map_err(|e| ImageError::InvalidReference(text.to_owned(), e.to_string()))
}

/// The name an image pulled by `reference` is stored under.
pub fn stored_name(reference: &Reference) -> String {
    reference.whole()
}

/// Whether `registry` (`host[:port]`) is on a loopback address (`localhost`, 127/8, ::1).
pub fn is_loopback(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => registry.rsplit_once(':').map_or(registry, |(h, p)| {
            match p.bytes().all(|b| b.is_ascii_digit()) {
                true => h,
                false => registry,
            }
        }),
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether to speak plain HTTP to `registry`: on loopback, or listed as insecure.
pub fn plain_http(registry: &str, insecure: &[String]) -> bool {
    is_loopback(registry) || insecure.iter().any(|r| r == registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_normalize() {
        assert_eq!(
            stored_name(&parse("python:3.12-slim").expect("ok")),
            "docker.io/library/python:3.12-slim"
        );
        let r = parse("127.0.0.1:5000/team/app:1.4").expect("ok");
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "team/app");
        let d = format!("localhost:5000/app@sha256:{}", "a".repeat(64));
        assert!(parse(&d).expect("ok").digest().is_some());
        assert!(parse("UPPER/Case").is_err());
    }

    #[test]
    fn only_loopback_or_listed_registries_are_plain_http() {
        assert!(plain_http("127.0.0.1:5000", &[]));
        assert!(plain_http("localhost:5000", &[]));
        assert!(plain_http("[::1]:5000", &[]));
        assert!(!plain_http("registry.example.com:5000", &[]));
        assert!(!plain_http("127.0.0.1.example.com", &[]));
        assert!(plain_http(
            "registry.example.com:5000",
            &["registry.example.com:5000".to_owned()]
        ));
    }
}
