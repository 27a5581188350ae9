//! What this dialect keeps with a sandbox beyond the engine's fields: its typed
//! attributes, kept by the engine under this dialect's name. User metadata keys with
//! the `openrelay.` prefix stay reserved (older servers kept the attributes there).

use crate::error::ApiError;
use sandboxd_engine::{CreateSandbox, Sandbox};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The name this dialect's attributes are kept under.
pub const DIALECT: &str = "openrelay";

/// Metadata keys with this prefix are reserved for the dialect.
pub const PREFIX: &str = "openrelay.";

/// The dialect's attributes of one sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attributes {
    pub template: String,
    pub ephemeral: bool,
    pub pinned: bool,
    #[serde(rename = "cpuRequest")]
    pub cpu_request: f64,
    #[serde(rename = "memoryRequestMiB")]
    pub memory_request_mib: u32,
    #[serde(rename = "autoPause")]
    pub auto_pause: bool,
}

/// Refuses user metadata that would use the dialect's reserved keys.
pub fn check_user(meta: &BTreeMap<String, String>) -> Result<(), ApiError> {
    match meta.keys().find(|k| k.starts_with(PREFIX)) {
        Some(k) => Err(ApiError::invalid(format!(
            "metadata key {k:?} uses the reserved prefix {PREFIX:?}"
        ))),
        None => Ok(()),
    }
}

impl Attributes {
    /// `request` keeping these attributes with the sandbox.
    pub fn attach(&self, request: CreateSandbox) -> CreateSandbox {
        request.attribute(DIALECT, self)
    }

    /// The attributes of `sb`; `None` for a sandbox another dialect made.
    pub fn of(sb: &Sandbox) -> Option<Attributes> {
        sb.attributes_of(DIALECT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored JSON names are the ones store migration 7 writes for older sandboxes.
    #[test]
    fn round_trips_under_the_names_the_migration_writes() {
        let a = Attributes {
            template: "python".into(),
            ephemeral: true,
            pinned: false,
            cpu_request: 0.5,
            memory_request_mib: 256,
            auto_pause: false,
        };
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"template": "python", "ephemeral": true, "pinned": false,
                "cpuRequest": 0.5, "memoryRequestMiB": 256, "autoPause": false})
        );
        assert_eq!(serde_json::from_value::<Attributes>(json).unwrap(), a);
        assert!(check_user(&BTreeMap::from([("openrelay.x".into(), String::new())])).is_err());
    }
}
