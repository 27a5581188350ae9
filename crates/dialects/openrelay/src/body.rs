//! Request bodies of create and exec, and their checks against the spec's bounds and
//! the template's resources.

use crate::error::ApiError;
use crate::meta;
use sandboxd_engine::{CreateSandbox, Requests, Resources, Template};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
pub const MAX_TIMEOUT_SECONDS: u64 = 86_400;
pub const DEFAULT_WAIT_SECONDS: u64 = 10;
pub const MAX_WAIT_SECONDS: u64 = 120;
pub const MIN_CPU_REQUEST: f64 = 0.25;
pub const MIN_MEMORY_REQUEST_MIB: u32 = 128;

/// The shell that runs a run's `cmd` (as `sh -c`), and what it does, for errors.
pub const SHELL: &str = "/bin/sh";
pub const SHELL_PURPOSE: &str = "runs a command's cmd (sh -c)";

/// A command: `cmd` run by `/bin/sh -c`, or an `argv` run as is (exactly one of them).
#[derive(Debug, Clone, Deserialize, PartialEq, utoipa::ToSchema)]
#[schema(as = Run)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// A shell command line (not blank), run by `/bin/sh -c`. Not with `argv`.
    #[schema(pattern = r"\S")]
    pub cmd: Option<String>,
    /// The program and its arguments, run as is. Not with `cmd`.
    #[schema(min_items = 1)]
    pub argv: Option<Vec<String>>,
    /// Working directory (absolute).
    pub cwd: Option<String>,
    /// Environment variables on top of the sandbox's.
    pub env: Option<BTreeMap<String, String>>,
}

impl RunSpec {
    /// The argv to run.
    pub fn argv(&self) -> Result<Vec<String>, ApiError> {
        match (&self.cmd, &self.argv) {
            (Some(cmd), None) if !cmd.trim().is_empty() => {
                Ok(vec![SHELL.into(), "-c".into(), cmd.clone()])
            }
            (None, Some(argv)) if !argv.is_empty() => Ok(argv.clone()),
            (Some(_), Some(_)) => Err(ApiError::invalid("run takes cmd or argv, not both")),
            _ => Err(ApiError::invalid("run needs a non-empty cmd or argv")),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    Shared,
    Pinned,
}

/// `POST /v1/sandboxes`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = CreateSandboxRequest)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateBody {
    /// A built-in template (`default`, `python`), one of the workspace's, or (sandboxd's
    /// extension) a stored OCI image by reference (`sandboxd images pull`).
    #[schema(example = "default")]
    pub template: String,
    /// A first command to run.
    pub run: Option<RunSpec>,
    /// vCPUs, at most the template's (absent: the template's).
    #[schema(minimum = 1)]
    pub cpu: Option<u32>,
    /// Memory in MiB, at most the template's (absent: the template's).
    #[serde(rename = "memoryMiB")]
    #[schema(minimum = 1)]
    pub memory_mib: Option<u32>,
    /// Guaranteed vCPUs, 0.25 to `cpu` (default 0.25; pinned: `cpu`).
    #[schema(minimum = 0.25)]
    pub cpu_request: Option<f64>,
    /// Guaranteed memory in MiB, 128 to `memoryMiB` (default 128).
    #[serde(rename = "memoryRequestMiB")]
    #[schema(minimum = 128)]
    pub memory_request_mib: Option<u32>,
    /// Lifetime in seconds (default 300).
    #[schema(minimum = 1, maximum = 86400)]
    pub timeout_seconds: Option<u64>,
    /// `shared` (default) or `pinned`.
    pub placement: Option<Placement>,
    /// Every command's default environment.
    pub env: Option<BTreeMap<String, String>>,
    /// Shorthand for `network` with mode `egress`. Not with `network`.
    #[schema(value_type = Option<crate::openapi::Egress>)]
    pub egress: Option<Value>,
    /// The sandbox's network policy layer. Not with `egress`.
    #[schema(value_type = Option<crate::openapi::Network>)]
    pub network: Option<Value>,
    /// The caller's own metadata (keys must not start with `openrelay.`).
    pub metadata: Option<BTreeMap<String, String>>,
    /// Leave no history when it ends (default false).
    pub ephemeral: Option<bool>,
    /// Seconds to wait for capacity (default 10; longer is cut to 120).
    #[schema(minimum = 0)]
    pub wait_seconds: Option<u64>,
    /// Consent to be moved to disk when the host needs the memory, and woken by the
    /// next operation (default false). Only gVisor sandboxes can go to disk (with or
    /// without egress); elsewhere the consent is kept and reported, and nothing moves.
    pub auto_pause: Option<bool>,
    /// sandboxd's extension: the isolation tier, `container` or `gvisor` (absent: the
    /// template's, else the workspace's default, else the server's).
    #[schema(pattern = "^(container|gvisor)$")]
    pub isolation: Option<String>,
}

/// An `isolation` field's tier (absent: `None`); an unknown name is a 400.
pub fn isolation(field: Option<&str>) -> Result<Option<sandboxd_engine::Isolation>, ApiError> {
    field
        .map(|name| {
            name.parse()
                .map_err(|e| ApiError::invalid(format!("isolation: {e}")))
        })
        .transpose()
}

/// A checked create: the engine request, its soft guarantees and placement, how long
/// to queue, and what to run.
pub struct CreatePlan {
    pub request: CreateSandbox,
    pub requests: Requests,
    pub wait: Duration,
    pub run: Option<RunSpec>,
}

fn within(what: &str, value: u64, min: u64, max: u64) -> Result<(), ApiError> {
    match (min..=max).contains(&value) {
        true => Ok(()),
        false => Err(ApiError::invalid(format!(
            "{what} must be between {min} and {max}, not {value}"
        ))),
    }
}

fn exceeds(what: &str, asked: u32, max: u32, template: &str) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::BAD_REQUEST,
        "RESOURCES_EXCEED_TEMPLATE",
        format!("{what} {asked} exceeds template {template:?}'s {max}"),
    )
}

impl CreateBody {
    /// Checks every field against its bounds and the template, and builds the plan.
    pub fn plan(self, template: &Template) -> Result<CreatePlan, ApiError> {
        let (network, egress) = crate::network::plan(self.network, self.egress)?;
        let tier = isolation(self.isolation.as_deref())?;
        let max = template.resources;
        let cpu = self.cpu.unwrap_or(max.vcpu);
        within("cpu", cpu.into(), 1, u32::MAX.into())?;
        if cpu > max.vcpu {
            return Err(exceeds("cpu", cpu, max.vcpu, &template.name));
        }
        let memory = self.memory_mib.unwrap_or(max.memory_mb);
        within("memoryMiB", memory.into(), 1, u32::MAX.into())?;
        if memory > max.memory_mb {
            return Err(exceeds("memoryMiB", memory, max.memory_mb, &template.name));
        }
        let pinned = self.placement == Some(Placement::Pinned);
        let cpu_request = match self.cpu_request {
            _ if pinned => f64::from(cpu),
            None => MIN_CPU_REQUEST,
            Some(r) if !(MIN_CPU_REQUEST..=f64::from(cpu)).contains(&r) => {
                return Err(ApiError::invalid(format!(
                    "cpuRequest must be between {MIN_CPU_REQUEST} and cpu ({cpu}), not {r}"
                )))
            }
            Some(r) => (r * 1000.0).round() / 1000.0,
        };
        let memory_request = match self.memory_request_mib {
            _ if pinned => memory,
            None => MIN_MEMORY_REQUEST_MIB.min(memory),
            Some(r) => {
                within(
                    "memoryRequestMiB",
                    r.into(),
                    MIN_MEMORY_REQUEST_MIB.into(),
                    memory.into(),
                )?;
                r
            }
        };
        let timeout = self.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
        within("timeoutSeconds", timeout, 1, MAX_TIMEOUT_SECONDS)?;
        // The spec cuts a longer wait to the maximum instead of refusing it.
        let wait = self
            .wait_seconds
            .unwrap_or(DEFAULT_WAIT_SECONDS)
            .min(MAX_WAIT_SECONDS);
        if let Some(run) = &self.run {
            run.argv()?;
        }
        let user_meta = self.metadata.unwrap_or_default();
        meta::check_user(&user_meta)?;
        let mut request = template.create_request(Resources {
            vcpu: cpu,
            memory_mb: memory,
        });
        request.environment = self.env.unwrap_or_default();
        request.timeout = Some(Duration::from_secs(timeout));
        request.auto_pause = self.auto_pause.unwrap_or(false);
        request.network = network.or(template.network);
        request.egress = egress;
        request.metadata = user_meta;
        request.isolation = tier.or(template.isolation);
        let request = meta::Attributes {
            template: template.name.clone(),
            ephemeral: self.ephemeral.unwrap_or(false),
            pinned,
            cpu_request,
            memory_request_mib: memory_request,
            auto_pause: self.auto_pause.unwrap_or(false),
        }
        .attach(request);
        let requests = Requests {
            cpu_millis: (cpu_request * 1000.0).round() as u32,
            memory_mb: memory_request,
            pinned_vcpus: pinned.then_some(cpu),
        };
        Ok(CreatePlan {
            request,
            requests,
            wait: Duration::from_secs(wait),
            run: self.run,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> Template {
        Template {
            name: "t".into(),
            description: String::new(),
            builtin: true,
            resources: Resources {
                vcpu: 2,
                memory_mb: 1024,
            },
            snapshot_id: None,
            image: None,
            created_at: None,
            network: None,
            disk_mb: 1024,
            isolation: None,
            memory: false,
        }
    }

    fn plan(v: Value) -> Result<CreatePlan, ApiError> {
        serde_json::from_value::<CreateBody>(v)
            .unwrap()
            .plan(&template())
    }

    fn code(v: Value) -> &'static str {
        plan(v).err().map(|e| e.body.code).unwrap_or("OK")
    }

    #[test]
    fn defaults_come_from_the_template_and_spec() {
        let p = plan(serde_json::json!({"template": "t"})).unwrap();
        assert_eq!(
            p.request.resources,
            Resources {
                vcpu: 2,
                memory_mb: 1024
            }
        );
        assert_eq!(p.request.timeout, Some(Duration::from_secs(300)));
        assert_eq!(p.wait, Duration::from_secs(10));
        assert_eq!(p.request.attributes["openrelay"]["cpuRequest"], 0.25);
        assert!(
            p.request.metadata.is_empty(),
            "attributes stay out of metadata"
        );
        assert_eq!((p.requests.cpu_millis, p.requests.memory_mb), (250, 128));
        let p =
            plan(serde_json::json!({"template": "t", "placement": "pinned", "cpu": 1})).unwrap();
        assert_eq!(p.requests.pinned_vcpus, Some(1));
        assert_eq!((p.requests.cpu_millis, p.requests.memory_mb), (1000, 1024));
    }

    #[test]
    fn bounds_at_and_past_the_edge() {
        use serde_json::json;
        assert_eq!(
            code(json!({"template": "t", "cpu": 2, "memoryMiB": 1024})),
            "OK"
        );
        assert_eq!(
            code(json!({"template": "t", "cpu": 3})),
            "RESOURCES_EXCEED_TEMPLATE"
        );
        assert_eq!(
            code(json!({"template": "t", "memoryMiB": 1025})),
            "RESOURCES_EXCEED_TEMPLATE"
        );
        assert_eq!(code(json!({"template": "t", "cpu": 0})), "INVALID_REQUEST");
        assert_eq!(
            code(json!({"template": "t", "timeoutSeconds": 86400})),
            "OK"
        );
        assert_eq!(
            code(json!({"template": "t", "timeoutSeconds": 86401})),
            "INVALID_REQUEST"
        );
        assert_eq!(code(json!({"template": "t", "cpuRequest": 0.25})), "OK");
        assert_eq!(
            code(json!({"template": "t", "cpuRequest": 0.249})),
            "INVALID_REQUEST"
        );
        assert_eq!(
            code(json!({"template": "t", "cpu": 1, "cpuRequest": 1.001})),
            "INVALID_REQUEST"
        );
        assert_eq!(
            code(json!({"template": "t", "memoryRequestMiB": 128})),
            "OK"
        );
        assert_eq!(
            code(json!({"template": "t", "memoryRequestMiB": 127})),
            "INVALID_REQUEST"
        );
        assert_eq!(
            code(json!({"template": "t", "memoryRequestMiB": 1025})),
            "INVALID_REQUEST"
        );
        assert_eq!(code(json!({"template": "t", "egress": {}})), "OK");
        assert_eq!(
            code(json!({"template": "t", "egress": {}, "network": {}})),
            "INVALID_REQUEST"
        );
        assert_eq!(code(json!({"template": "t", "run": {}})), "INVALID_REQUEST");
        let p = plan(json!({"template": "t", "waitSeconds": 121})).unwrap();
        assert_eq!(p.wait, Duration::from_secs(120));
    }
}
