//! What this dialect keeps with a sandbox beyond the engine's fields: stored in the
//! sandbox's metadata under the reserved `openrelay.` prefix and stripped on the way out.

use crate::error::ApiError;
use std::collections::BTreeMap;

/// Metadata keys with this prefix belong to the dialect.
pub const PREFIX: &str = "openrelay.";

/// The dialect's attributes of one sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Attributes {
    pub template: String,
    pub ephemeral: bool,
    pub pinned: bool,
    pub cpu_request: f64,
    pub memory_request_mib: u32,
    pub auto_pause: bool,
}

/// Refuses user metadata that would collide with the dialect's keys.
pub fn check_user(meta: &BTreeMap<String, String>) -> Result<(), ApiError> {
    match meta.keys().find(|k| k.starts_with(PREFIX)) {
        Some(k) => Err(ApiError::invalid(format!(
            "metadata key {k:?} uses the reserved prefix {PREFIX:?}"
        ))),
        None => Ok(()),
    }
}

impl Attributes {
    /// `user` plus the attributes under their reserved keys.
    pub fn merge_into(self, mut user: BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut put = |k: &str, v: String| user.insert(format!("{PREFIX}{k}"), v);
        put("template", self.template);
        put("ephemeral", self.ephemeral.to_string());
        put(
            "placement",
            if self.pinned { "pinned" } else { "shared" }.into(),
        );
        put("cpuRequest", self.cpu_request.to_string());
        put("memoryRequestMiB", self.memory_request_mib.to_string());
        put("autoPause", self.auto_pause.to_string());
        user
    }

    /// Splits stored metadata into the attributes (`None` for a sandbox another dialect
    /// made) and the user's own metadata.
    pub fn split(all: &BTreeMap<String, String>) -> (Option<Attributes>, BTreeMap<String, String>) {
        let get = |k: &str| all.get(&format!("{PREFIX}{k}"));
        let attrs = get("template").map(|t| Attributes {
            template: t.clone(),
            ephemeral: get("ephemeral").is_some_and(|v| v == "true"),
            pinned: get("placement").is_some_and(|v| v == "pinned"),
            cpu_request: get("cpuRequest")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0),
            memory_request_mib: get("memoryRequestMiB")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            auto_pause: get("autoPause").is_some_and(|v| v == "true"),
        });
        let user = all
            .iter()
            .filter(|(k, _)| !k.starts_with(PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (attrs, user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_keeps_user_metadata_apart() {
        let a = Attributes {
            template: "python".into(),
            ephemeral: true,
            pinned: false,
            cpu_request: 0.5,
            memory_request_mib: 256,
            auto_pause: false,
        };
        let user = BTreeMap::from([("team".to_string(), "x".to_string())]);
        let all = a.clone().merge_into(user.clone());
        assert_eq!(Attributes::split(&all), (Some(a), user));
        assert!(check_user(&BTreeMap::from([("openrelay.x".into(), String::new())])).is_err());
    }
}
