//! Prometheus metrics the engine owns: one registry, the counters and histograms that
//! operations record into, and the gauges refreshed from the store, the backend and
//! the data directory each time the metrics are read. Label values come from closed
//! sets (operations, outcomes, states, tiers, route templates): never ids or keys.

mod process;
mod refresh;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Agent connections that failed (could not connect, or broke off), process-wide.
static AGENT_CONNECTION_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Counts one failed agent connection.
pub(crate) fn agent_connection_error() {
    AGENT_CONNECTION_ERRORS.fetch_add(1, Ordering::Relaxed);
}

/// Lifecycle operations counted with their outcome.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Operation {
    Create,
    Destroy,
    Pause,
    Resume,
    Snapshot,
}

impl Operation {
    const ALL: [Operation; 5] = [
        Operation::Create,
        Operation::Destroy,
        Operation::Pause,
        Operation::Resume,
        Operation::Snapshot,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "create",
            Operation::Destroy => "destroy",
            Operation::Pause => "pause",
            Operation::Resume => "resume",
            Operation::Snapshot => "snapshot",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StartLabels {
    start: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExecLabels {
    /// `captured` (run to completion, output returned at once) or `streamed`.
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
    tier: &'static str,
}

/// The isolation tier whose warm pool a figure is of.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabels {
    tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DiskLabels {
    area: &'static str,
}

/// Labels of one HTTP request: its dialect, its route template (never the path as
/// sent), its method and its status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub dialect: &'static str,
    pub route: String,
    pub method: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpRouteLabels {
    dialect: &'static str,
    route: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds from 1 ms to about 16 min, doubling.
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// The engine's metrics and their registry.
pub struct Metrics {
    registry: Registry,
    operations: Family<OperationLabels, Counter>,
    create_seconds: HistogramFamily<StartLabels>,
    exec_seconds: HistogramFamily<ExecLabels>,
    http_requests: Family<HttpLabels, Counter>,
    http_seconds: HistogramFamily<HttpRouteLabels>,
    store_seconds: HistogramFamily<StoreLabels>,
    sandboxes: Family<StateLabels, Gauge>,
    warm_ready: Family<TierLabels, Gauge>,
    warm_target: Family<TierLabels, Gauge>,
    warm_hits: Family<TierLabels, Counter>,
    warm_misses: Family<TierLabels, Counter>,
    agent_errors: Counter,
    disk_bytes: Family<DiskLabels, Gauge>,
    cpu_seconds: Counter<f64, AtomicU64>,
    resident_bytes: Gauge,
    /// Counts already added from sources that keep their own totals.
    seen: Mutex<refresh::Seen>,
    /// The last measure of the data directory, reused for a while (a walk is costly).
    disk_cache: Mutex<Option<refresh::DiskMeasure>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sandboxd");
        let m = Metrics {
            registry: Registry::default(),
            operations: Family::default(),
            create_seconds: Family::new_with_constructor(seconds_histogram),
            exec_seconds: Family::new_with_constructor(seconds_histogram),
            http_requests: Family::default(),
            http_seconds: Family::new_with_constructor(seconds_histogram),
            store_seconds: Family::new_with_constructor(seconds_histogram),
            sandboxes: Family::default(),
            warm_ready: Family::default(),
            warm_target: Family::default(),
            warm_hits: Family::default(),
            warm_misses: Family::default(),
            agent_errors: Counter::default(),
            disk_bytes: Family::default(),
            cpu_seconds: Counter::default(),
            resident_bytes: Gauge::default(),
            seen: Default::default(),
            disk_cache: Default::default(),
        };
        let r = &mut registry;
        r.register(
            "sandboxes",
            "Sandboxes holding host resources, by state and isolation tier",
            m.sandboxes.clone(),
        );
        r.register(
            "operations",
            "Lifecycle operations (create, destroy, pause, resume, snapshot) by outcome",
            m.operations.clone(),
        );
        r.register_with_unit(
            "create_duration",
            "Time to create a sandbox, by warm or cold start",
            Unit::Seconds,
            m.create_seconds.clone(),
        );
        r.register_with_unit(
            "exec_duration",
            "Time of command executions, captured or streamed (to the stream's end)",
            Unit::Seconds,
            m.exec_seconds.clone(),
        );
        r.register(
            "http_requests",
            "HTTP requests by dialect, route template, method and status",
            m.http_requests.clone(),
        );
        r.register_with_unit(
            "http_request_duration",
            "HTTP request handling time by dialect and route template",
            Unit::Seconds,
            m.http_seconds.clone(),
        );
        r.register_with_unit(
            "store_operation_duration",
            "Time of sandbox database operations",
            Unit::Seconds,
            m.store_seconds.clone(),
        );
        r.register(
            "warm_pool_ready",
            "Warm sandbox inits (gVisor: warm sandboxes) ready to be taken, by tier",
            m.warm_ready.clone(),
        );
        r.register(
            "warm_pool_target",
            "Warm inits the pool aims to hold now (its base, its start size, or more while bursts grow it), by tier: ready at target means full",
            m.warm_target.clone(),
        );
        r.register(
            "warm_pool_hits",
            "Sandbox starts that took a warm init, by tier",
            m.warm_hits.clone(),
        );
        r.register(
            "warm_pool_misses",
            "Sandbox starts that found no fitting warm init, by tier (a backend without a pool counts none)",
            m.warm_misses.clone(),
        );
        r.register(
            "agent_connection_errors",
            "Connections to sandbox agents that failed or broke off",
            m.agent_errors.clone(),
        );
        r.register_with_unit(
            "disk_usage",
            "Bytes allocated in the data directory (all of it, and its layer store)",
            Unit::Bytes,
            m.disk_bytes.clone(),
        );
        r.register_with_unit(
            "process_cpu",
            "CPU time the server process used (user and system)",
            Unit::Seconds,
            m.cpu_seconds.clone(),
        );
        r.register_with_unit(
            "process_resident_memory",
            "Resident memory of the server process",
            Unit::Bytes,
            m.resident_bytes.clone(),
        );
        // Every operation and outcome, and both starts, from zero: a rate over them is
        // defined before the first create.
        for op in Operation::ALL {
            for outcome in ["ok", "error"] {
                drop(m.operations.get_or_create(&OperationLabels {
                    operation: op.as_str(),
                    outcome,
                }));
            }
        }
        for start in ["warm", "cold"] {
            drop(m.create_seconds.get_or_create(&StartLabels { start }));
        }
        for tier in refresh::TIERS {
            let labels = TierLabels { tier };
            drop(m.warm_ready.get_or_create(&labels));
            drop(m.warm_target.get_or_create(&labels));
            drop(m.warm_hits.get_or_create(&labels));
            drop(m.warm_misses.get_or_create(&labels));
        }
        for mode in ["captured", "streamed"] {
            drop(m.exec_seconds.get_or_create(&ExecLabels { mode }));
        }
        Metrics { registry, ..m }
    }

    /// Counts one lifecycle operation.
    pub(crate) fn operation<T, E>(&self, op: Operation, result: &Result<T, E>) {
        let outcome = if result.is_ok() { "ok" } else { "error" };
        self.operations
            .get_or_create(&OperationLabels {
                operation: op.as_str(),
                outcome,
            })
            .inc();
    }

    /// Times a create that started a sandbox, warm or cold.
    pub(crate) fn create_started(&self, warm: bool, took: Duration) {
        let start = if warm { "warm" } else { "cold" };
        self.create_seconds
            .get_or_create(&StartLabels { start })
            .observe(took.as_secs_f64());
    }

    /// Times a captured exec.
    pub(crate) fn exec(&self, took: Duration) {
        self.exec_seconds
            .get_or_create(&ExecLabels { mode: "captured" })
            .observe(took.as_secs_f64());
    }

    /// Times a streamed exec, from its request to its stream's end (or its failure).
    pub(crate) fn exec_streamed(&self, took: Duration) {
        self.exec_seconds
            .get_or_create(&ExecLabels { mode: "streamed" })
            .observe(took.as_secs_f64());
    }

    /// Times one store operation.
    pub(crate) fn store(&self, operation: &'static str, took: Duration) {
        self.store_seconds
            .get_or_create(&StoreLabels { operation })
            .observe(took.as_secs_f64());
    }

    /// Counts and times one HTTP request (the server calls this; dialects do not).
    pub fn http_request(&self, labels: HttpLabels, took: Duration) {
        self.http_seconds
            .get_or_create(&HttpRouteLabels {
                dialect: labels.dialect,
                route: labels.route.clone(),
            })
            .observe(took.as_secs_f64());
        self.http_requests.get_or_create(&labels).inc();
    }

    /// The registry in `format`, with that format's content type.
    pub fn encode(&self, format: Format) -> (String, &'static str) {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = match format {
            Format::Prometheus => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            }
            Format::OpenMetrics => {
                prometheus_client::encoding::text::encode(&mut out, &self.registry)
            }
        };
        let kind = match format {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        };
        (out, kind)
    }
}

/// The exposition formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4 (`promtool check metrics` reads it).
    Prometheus,
    /// OpenMetrics 1.0 text, for scrapers that ask for it.
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when an `Accept` header asks for it, else the Prometheus text format.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
            true => Format::OpenMetrics,
            false => Format::Prometheus,
        }
    }
}
