//! The create body's `network` and `egress` fields: the sandbox's network policy layer
//! (under its workspace's), in one of two shapes that exclude each other.
//!
//! - `network`: `{"mode": "egress" | "none", "allow": [RULE…], "deny": [RULE…]}`, every
//!   field optional (mode `egress`); `none` leaves only loopback and takes no rules.
//! - `egress`: `{"allow": [RULE…], "deny": [RULE…]}`, the same as `network` with mode
//!   `egress`.
//!
//! A RULE is an IPv4 CIDR (`10.0.0.0/8`, a bare address is a /32) or a domain name.

use crate::error::ApiError;
use sandboxd_engine::{EgressPolicy, EgressRule, NetworkMode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkBody {
    #[serde(default)]
    mode: NetworkMode,
    #[serde(default)]
    allow: Vec<EgressRule>,
    #[serde(default)]
    deny: Vec<EgressRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EgressBody {
    #[serde(default)]
    allow: Vec<EgressRule>,
    #[serde(default)]
    deny: Vec<EgressRule>,
}

fn parse<T: DeserializeOwned>(field: &str, v: Value) -> Result<T, ApiError> {
    serde_json::from_value(v).map_err(|e| ApiError::invalid(format!("{field}: {e}")))
}

/// The mode and policy layer a create asks for; `(None, None)` when it names neither
/// (its workspace's defaults apply).
pub fn plan(
    network: Option<Value>,
    egress: Option<Value>,
) -> Result<(Option<NetworkMode>, Option<EgressPolicy>), ApiError> {
    match (network, egress) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "network and egress exclude each other: send one",
        )),
        (Some(v), None) => {
            let b: NetworkBody = parse("network", v)?;
            if b.mode == NetworkMode::None && !(b.allow.is_empty() && b.deny.is_empty()) {
                return Err(ApiError::invalid(
                    "network: mode none takes no allow or deny rules",
                ));
            }
            let layer = (b.mode == NetworkMode::Egress).then_some(EgressPolicy {
                allow: b.allow,
                deny: b.deny,
            });
            Ok((Some(b.mode), layer))
        }
        (None, Some(v)) => {
            let b: EgressBody = parse("egress", v)?;
            let layer = EgressPolicy {
                allow: b.allow,
                deny: b.deny,
            };
            Ok((Some(NetworkMode::Egress), Some(layer)))
        }
        (None, None) => Ok((None, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes_map_to_mode_and_layer() {
        let (mode, layer) = plan(None, Some(json!({"deny": ["198.18.0.3", "bad.test"]}))).unwrap();
        assert_eq!(mode, Some(NetworkMode::Egress));
        let layer = layer.unwrap();
        assert!(layer.allow.is_empty());
        assert_eq!(
            layer.deny.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            ["198.18.0.3/32", "bad.test"]
        );
        assert_eq!(
            plan(Some(json!({"mode": "none"})), None).unwrap(),
            (Some(NetworkMode::None), None)
        );
        let (mode, layer) = plan(Some(json!({"allow": ["10.0.0.0/8"]})), None).unwrap();
        assert_eq!(
            (mode, layer.map(|l| l.allow.len())),
            (Some(NetworkMode::Egress), Some(1))
        );
        assert_eq!(plan(None, None).unwrap(), (None, None));
    }

    #[test]
    fn bad_shapes_are_invalid() {
        for (network, egress) in [
            (Some(json!({})), Some(json!({}))),
            (Some(json!({"mode": "none", "deny": ["x.test"]})), None),
            (Some(json!({"mode": "open"})), None),
            (None, Some(json!({"deny": ["not a name"]}))),
            (None, Some(json!({"allow": ["10.0.0.0/33"]}))),
            (None, Some(json!({"mode": "egress"}))),
            (None, Some(json!(["10.0.0.0/8"]))),
        ] {
            let err = plan(network.clone(), egress.clone()).err();
            assert_eq!(
                err.map(|e| e.body.code),
                Some("INVALID_REQUEST"),
                "{network:?} {egress:?}"
            );
        }
    }
}
