//! Egress policy of workspaces (the first policy layer of every sandbox in one) and the
//! network a sandbox is started with: its mode, then the workspace and sandbox layers.

use crate::error::EngineError;
use crate::model::CreateSandbox;
use sandboxd_runtime::{EgressPolicy, EgressRule, NetworkMode, NetworkSpec};
use sandboxd_store::{EgressPolicyRecord, Store};
use time::OffsetDateTime;

/// The workspace's stored policy, if any.
pub fn workspace_policy(store: &dyn Store, ws: &str) -> Result<Option<EgressPolicy>, EngineError> {
    let Some(rec) = store.get_egress_policy(ws)? else {
        return Ok(None);
    };
    let parse = |rules: &[String]| -> Result<Vec<EgressRule>, EngineError> {
        rules
            .iter()
            .map(|r| {
                r.parse().map_err(|e| {
                    EngineError::with_source(
                        crate::ErrorCode::Internal,
                        format!("workspace {ws:?} has an unreadable egress policy"),
                        e,
                    )
                })
            })
            .collect()
    };
    Ok(Some(EgressPolicy {
        allow: parse(&rec.allow)?,
        deny: parse(&rec.deny)?,
    }))
}

/// What a create asked of the network: its mode (the server's default filled in) and
/// the sandbox's own egress layer. Recorded with the sandbox, so that a repeated named
/// create asking for another network is not taken for the same create.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RequestedNetwork {
    pub mode: NetworkMode,
    #[serde(default)]
    pub egress: Option<EgressPolicy>,
}

impl RequestedNetwork {
    /// `req`'s network on a server whose default mode is `default`.
    pub(crate) fn of(req: &CreateSandbox, default: NetworkMode) -> Self {
        let mode = req.network.unwrap_or(default);
        RequestedNetwork {
            mode,
            egress: req.egress.clone().filter(|_| mode == NetworkMode::Egress),
        }
    }
}

/// Sets (replacing) the workspace's policy; it applies to sandboxes created afterwards.
pub fn set_workspace_policy(
    store: &dyn Store,
    ws: &str,
    policy: &EgressPolicy,
) -> Result<(), EngineError> {
    crate::validate::egress_policy(policy)?;
    let text = |rules: &[EgressRule]| rules.iter().map(|r| r.to_string()).collect();
    store.set_egress_policy(&EgressPolicyRecord {
        workspace: ws.to_owned(),
        allow: text(&policy.allow),
        deny: text(&policy.deny),
        updated_at: OffsetDateTime::now_utc(),
    })?;
    Ok(())
}

/// Removes the workspace's policy; false when it had none.
pub fn clear_workspace_policy(store: &dyn Store, ws: &str) -> Result<bool, EngineError> {
    Ok(store.delete_egress_policy(ws)?)
}

/// A request's network mode and sandbox layer agree: a policy needs egress.
pub(crate) fn check_request(req: &CreateSandbox) -> Result<(), EngineError> {
    match (req.network, &req.egress) {
        (Some(NetworkMode::None), Some(_)) => Err(EngineError::invalid(
            "an egress policy needs network mode egress, not none",
        )),
        _ => Ok(()),
    }
}

/// The server's mode is a ceiling, not only a default: on a server whose operator chose
/// `none`, a request asking for egress (or giving an egress policy) is refused, never
/// given a network.
pub(crate) fn check_ceiling(req: &CreateSandbox, server: NetworkMode) -> Result<(), EngineError> {
    let wants_egress = req.network == Some(NetworkMode::Egress) || req.egress.is_some();
    match server == NetworkMode::None && wants_egress {
        true => Err(EngineError::invalid(
            "this server allows no sandbox network (its network mode is none): \
             a sandbox cannot ask for egress",
        )),
        false => Ok(()),
    }
}

/// The network of a new sandbox: the request's mode (else `default`); with egress,
/// the workspace's layer and then the request's, so the sandbox can only narrow.
pub(crate) fn network_spec(
    store: &dyn Store,
    ws: &str,
    req: &CreateSandbox,
    default: NetworkMode,
) -> Result<NetworkSpec, EngineError> {
    let mode = req.network.unwrap_or(default);
    if mode == NetworkMode::None {
        return Ok(NetworkSpec::none());
    }
    let layers = workspace_policy(store, ws)?
        .into_iter()
        .chain(req.egress.clone())
        .collect();
    Ok(NetworkSpec::egress(layers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Resources;
    use sandboxd_store::SqliteStore;

    fn policy(allow: &[&str], deny: &[&str]) -> EgressPolicy {
        let rules = |l: &[&str]| l.iter().map(|r| r.parse().expect("rule")).collect();
        EgressPolicy {
            allow: rules(allow),
            deny: rules(deny),
        }
    }

    fn request(network: Option<NetworkMode>, egress: Option<EgressPolicy>) -> CreateSandbox {
        CreateSandbox {
            name: None,
            resources: Resources {
                vcpu: 1,
                memory_mb: 64,
            },
            image: None,
            snapshot_id: None,
            environment: Default::default(),
            secrets: Vec::new(),
            metadata: Default::default(),
            timeout: None,
            auto_pause: false,
            network,
            egress,
            disk_mb: None,
            aliases: Default::default(),
            attributes: Default::default(),
            isolation: None,
        }
    }

    #[test]
    fn workspace_layer_comes_first_and_mode_none_drops_layers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(dir.path().join("db")).expect("store");
        let ws_policy = policy(&["198.18.0.0/15"], &["bad.test"]);
        set_workspace_policy(&store, "w", &ws_policy).expect("set");
        assert_eq!(
            workspace_policy(&store, "w").expect("get"),
            Some(ws_policy.clone())
        );
        let sb = policy(&[], &["198.18.0.3"]);
        let spec = network_spec(
            &store,
            "w",
            &request(None, Some(sb.clone())),
            NetworkMode::Egress,
        )
        .expect("spec");
        assert_eq!(spec, NetworkSpec::egress(vec![ws_policy, sb.clone()]));
        let other =
            network_spec(&store, "other", &request(None, None), NetworkMode::Egress).expect("spec");
        assert_eq!(other, NetworkSpec::egress(vec![]));
        let none =
            network_spec(&store, "w", &request(None, None), NetworkMode::None).expect("spec");
        assert_eq!(none, NetworkSpec::none());
        assert!(check_request(&request(Some(NetworkMode::None), Some(sb))).is_err());
        assert!(clear_workspace_policy(&store, "w").expect("clear"));
        assert_eq!(workspace_policy(&store, "w").expect("get"), None);
    }

    #[test]
    fn a_server_without_network_is_a_ceiling() {
        let none = NetworkMode::None;
        let egress = NetworkMode::Egress;
        let sb = policy(&["10.0.0.0/8"], &[]);
        assert!(check_ceiling(&request(Some(egress), None), none).is_err());
        assert!(check_ceiling(&request(None, Some(sb.clone())), none).is_err());
        assert!(check_ceiling(&request(None, None), none).is_ok());
        assert!(check_ceiling(&request(Some(none), None), none).is_ok());
        assert!(check_ceiling(&request(Some(egress), Some(sb)), egress).is_ok());
    }
}
