//! The platform a multi-platform image index resolves to: the host's own (`linux` and
//! the host's architecture, as Go names it: `amd64`, `arm64`…), never a fixed one. The
//! resolver remembers the platforms an index offered, so that an index with none for
//! this host fails with an error that names them.

use oci_client::manifest::ImageIndexEntry;
use oci_spec::image::{Arch, Os};
use std::sync::{Arc, Mutex};

/// What `oci-client` calls to pick an index entry: its digest.
pub type Resolver = dyn Fn(&[ImageIndexEntry]) -> Option<String> + Send + Sync;

/// This host's platform, `os/arch` (`linux/amd64`).
pub fn host() -> String {
    format!("{}/{}", Os::default(), Arch::default())
}

/// The platforms the last index offered (`os/arch[/variant]`), when one was resolved
/// and nothing in it fitted the host.
#[derive(Clone, Default)]
pub struct Unmatched(Arc<Mutex<Option<Vec<String>>>>);

impl Unmatched {
    /// The platforms of an index that had no image for this host, if that happened.
    pub fn offered(&self) -> Option<Vec<String>> {
        self.0.lock().ok()?.clone()
    }

    /// A resolver for `oci-client`: the first entry for this host's OS and architecture
    /// (an `arm64` entry without a variant or with `v8`), recording the offered
    /// platforms in `self` when none fits.
    pub fn resolver(&self) -> Box<Resolver> {
        let unmatched = self.clone();
        Box::new(move |entries: &[ImageIndexEntry]| {
            let (os, arch) = (Os::default(), Arch::default());
            let found = entries.iter().find(|e| {
                e.platform.as_ref().is_some_and(|p| {
                    p.os == os
                        && p.architecture == arch
                        && (arch != Arch::ARM64 || p.variant.as_deref().is_none_or(|v| v == "v8"))
                })
            });
            if found.is_none() {
                let offered = entries
                    .iter()
                    .filter_map(|e| e.platform.as_ref())
                    .map(|p| match &p.variant {
                        Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
                        None => format!("{}/{}", p.os, p.architecture),
                    })
                    .collect();
                if let Ok(mut slot) = unmatched.0.lock() {
                    *slot = Some(offered);
                }
            }
            found.map(|e| e.digest.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_client::manifest::Platform;

    fn entry(arch: &str, variant: Option<&str>, digest: &str) -> ImageIndexEntry {
        ImageIndexEntry {
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            digest: digest.into(),
            size: 1,
            platform: Some(Platform {
                architecture: Arch::from(arch),
                os: Os::Linux,
                os_version: None,
                os_features: None,
                variant: variant.map(str::to_owned),
                features: None,
            }),
            annotations: None,
            artifact_type: None,
        }
    }

    #[test]
    fn the_host_entry_wins_wherever_it_is_listed() {
        let host_arch = Arch::default().to_string();
        let other = if host_arch == "amd64" {
            "arm64"
        } else {
            "amd64"
        };
        let unmatched = Unmatched::default();
        let resolve = unmatched.resolver();
        let entries = [
            entry(other, None, "sha256:other"),
            entry(&host_arch, None, "sha256:host"),
        ];
        assert_eq!(resolve(&entries).as_deref(), Some("sha256:host"));
        assert_eq!(unmatched.offered(), None);
        assert_eq!(host(), format!("linux/{host_arch}"));
    }

    #[test]
    fn an_index_without_the_host_records_what_it_offered() {
        let unmatched = Unmatched::default();
        let resolve = unmatched.resolver();
        let entries = [
            entry("s390x", None, "sha256:a"),
            entry("riscv64", None, "sha256:b"),
        ];
        assert_eq!(resolve(&entries), None);
        assert_eq!(
            unmatched.offered(),
            Some(vec!["linux/s390x".to_owned(), "linux/riscv64".to_owned()])
        );
    }
}
