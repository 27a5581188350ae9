//! The build cache of Dockerfile steps: a step's key is the sha256 of its parent state
//! (layer chain, configuration), its instruction after substitution, and what else
//! decides its result (the copied files' layer digest, the build args a RUN sees). An
//! entry records the state after the step, under `images/build-cache/<key>`; an entry
//! whose layers were pruned since is a miss.

use sandboxd_runtime::linux::layers::LayerStore;
use sandboxd_runtime::ImageConfig;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// An image being built: its layers (lowest first), configuration, and whether it runs
/// with the host's /usr (built from `default`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct BuildState {
    pub layers: Vec<String>,
    pub config: ImageConfig,
    #[serde(default)]
    pub host_usr: bool,
}

impl BuildState {
    /// The cache key of a step on this state: `parts` are the instruction text and what
    /// else decides the result.
    pub fn key(&self, parts: &[&str]) -> String {
        let mut h = Sha256::new();
        h.update(serde_json::to_vec(self).unwrap_or_default());
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p.as_bytes());
        }
        hex::encode(h.finalize())
    }

    /// Adds `digest` on top. A layer already in the chain is dropped from its lower
    /// place: everything it holds is shadowed by its copy on top, and overlayfs refuses
    /// one directory twice.
    pub fn push_layer(&mut self, digest: &str) {
        self.layers.retain(|d| d != digest);
        self.layers.push(digest.to_owned());
    }
}

/// The cache directory of a data directory.
pub struct BuildCache {
    dir: PathBuf,
}

impl BuildCache {
    pub fn new(data_dir: &Path) -> BuildCache {
        BuildCache {
            dir: data_dir.join("images").join("build-cache"),
        }
    }

    /// The state cached under `key`, if all its layers are still stored.
    pub fn get(&self, key: &str, layers: &LayerStore) -> Option<BuildState> {
        let text = std::fs::read(self.dir.join(key)).ok()?;
        let state: BuildState = serde_json::from_slice(&text).ok()?;
        state
            .layers
            .iter()
            .all(|d| layers.path(d).is_ok())
            .then_some(state)
    }

    /// Records `state` under `key` (atomically).
    pub fn put(&self, key: &str, state: &BuildState) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!(".tmp-{}", uuid::Uuid::new_v4()));
        std::fs::write(&tmp, serde_json::to_vec(state).unwrap_or_default())?;
        std::fs::rename(&tmp, self.dir.join(key)).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_depend_on_parent_and_parts() {
        let a = BuildState::default();
        let mut b = a.clone();
        b.push_layer("x");
        assert_ne!(a.key(&["RUN true"]), b.key(&["RUN true"]));
        assert_ne!(a.key(&["RUN true"]), a.key(&["RUN false"]));
        assert_ne!(a.key(&["ab", "c"]), a.key(&["a", "bc"]));
        assert_eq!(a.key(&["RUN true"]), a.clone().key(&["RUN true"]));
        b.push_layer("y");
        b.push_layer("x");
        assert_eq!(b.layers, ["y", "x"]);
    }

    #[test]
    fn entries_round_trip_and_miss_without_layers() {
        let data = tempfile::tempdir().unwrap();
        let store = LayerStore::new(data.path()).unwrap();
        let cache = BuildCache::new(data.path());
        let scratch = store.scratch().unwrap();
        std::fs::write(scratch.join("f"), "x").unwrap();
        let layer = store.commit(&scratch).unwrap();
        let mut s = BuildState::default();
        s.push_layer(&layer.digest);
        cache.put("k", &s).unwrap();
        assert_eq!(cache.get("k", &store), Some(s));
        assert_eq!(cache.get("other", &store), None);
        store.delete(&layer.digest).unwrap();
        assert_eq!(cache.get("k", &store), None);
    }
}
