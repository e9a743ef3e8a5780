//! Prometheus metrics: what the server counts as it answers (tool calls by tool and outcome,
//! their latency, calls in flight, requests by route and status, 429s, errors by type, spawn
//! failures, snapshot durations) and what it reads at each scrape (processes alive, artifacts
//! kept, bytes captured, the protections in force). Served as `GET /metrics` in the Prometheus
//! text format 0.0.4.
//!
//! Labels only take values from closed sets (tool names of the registry, route templates,
//! error types), so a client cannot grow the series without bound.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use sandbox_protocol::{ErrorType, Protection};

use crate::sandbox::output::ArtifactStore;
use crate::sandbox::processes::ProcessTable;

/// The exposition's media type.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Tool-call latency buckets, in seconds: a `read_file` takes a millisecond, a build minutes.
const CALL_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabel {
    error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

/// The server's metrics. Cheap to clone; every clone records into the same registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    tool_calls: Family<CallLabels, Counter>,
    tool_duration: Family<CallLabels, Histogram>,
    in_flight: Family<ToolLabel, Gauge>,
    requests: Family<RequestLabels, Counter>,
    request_duration: Family<RouteLabels, Histogram>,
    errors: Family<ErrorLabel, Counter>,
    throttled: Counter,
    spawn_failures: Counter,
    snapshot_duration: Family<OperationLabel, Histogram>,
}

/// What the server reads at each scrape.
#[derive(Debug, Clone)]
pub struct Live {
    pub processes: ProcessTable,
    pub artifacts: ArtifactStore,
    pub protections: Arc<Vec<Protection>>,
    pub tools: Vec<String>,
}

/// How a tool call ended, as a label: `ok`, `exit_nonzero`, `timeout`, `overloaded`, or the
/// error type of a refused call (`invalid_arguments`, `file_not_found`, `spawn_failed`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    ExitNonzero,
    Timeout,
    Error(ErrorType),
}

impl Outcome {
    /// The outcome of a tool's answer: `timed_out` and a non-zero `exit_code` are outcomes of
    /// their own.
    pub fn of_result(result: &serde_json::Value) -> Outcome {
        if result.get("timed_out").and_then(serde_json::Value::as_bool) == Some(true) {
            Outcome::Timeout
        } else if result
            .get("exit_code")
            .and_then(serde_json::Value::as_i64)
            .is_some_and(|code| code != 0)
        {
            Outcome::ExitNonzero
        } else {
            Outcome::Ok
        }
    }

    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ExitNonzero => "exit_nonzero",
            Outcome::Timeout => "timeout",
            Outcome::Error(kind) => kind.as_str(),
        }
    }
}

/// A tool call in flight; dropping it records the call (a call whose client went away counts
/// as `cancelled`).
#[derive(Debug)]
pub struct CallTimer {
    metrics: Metrics,
    tool: String,
    started: std::time::Instant,
    outcome: Option<Outcome>,
}

impl CallTimer {
    /// Records how the call ended.
    pub fn finish(mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
    }
}

impl Drop for CallTimer {
    fn drop(&mut self) {
        let inner = &self.metrics.inner;
        let labels = CallLabels {
            tool: std::mem::take(&mut self.tool),
            outcome: self.outcome.map_or("cancelled", Outcome::label),
        };
        inner
            .tool_duration
            .get_or_create(&labels)
            .observe(self.started.elapsed().as_secs_f64());
        // Counted before it leaves the in-flight gauge: a scrape that sees the call gone sees
        // it counted.
        inner.tool_calls.get_or_create(&labels).inc();
        inner
            .in_flight
            .get_or_create(&ToolLabel { tool: labels.tool })
            .dec();
    }
}

impl Metrics {
    /// The registry, with the gauges read from `live` at each scrape. Every enabled tool's
    /// series exist from the start (at 0), so a rate over them is defined before the first call.
    pub fn new(live: Live) -> Metrics {
        let mut registry = Registry::with_prefix("sandbox");
        let tool_calls = Family::<CallLabels, Counter>::default();
        let tool_duration =
            Family::<CallLabels, Histogram>::new_with_constructor(|| Histogram::new(CALL_BUCKETS));
        let in_flight = Family::<ToolLabel, Gauge>::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let request_duration =
            Family::<RouteLabels, Histogram>::new_with_constructor(|| Histogram::new(CALL_BUCKETS));
        let snapshot_duration = Family::<OperationLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(CALL_BUCKETS)
        });
        for tool in &live.tools {
            let tool = ToolLabel { tool: tool.clone() };
            let _ = in_flight.get_or_create(&tool);
            let _ = tool_calls.get_or_create(&CallLabels {
                tool: tool.tool,
                outcome: "ok",
            });
        }
        let inner = Inner {
            tool_calls,
            tool_duration,
            in_flight,
            requests,
            request_duration,
            errors: Family::default(),
            throttled: Counter::default(),
            spawn_failures: Counter::default(),
            snapshot_duration,
            registry: Registry::default(),
        };
        inner.register(&mut registry);
        registry.register_collector(Box::new(live));
        Metrics {
            inner: Arc::new(Inner { registry, ..inner }),
        }
    }

    /// Starts timing a call of `tool` (an enabled tool's name).
    pub fn start_call(&self, tool: &str) -> CallTimer {
        self.inner
            .in_flight
            .get_or_create(&ToolLabel {
                tool: tool.to_owned(),
            })
            .inc();
        CallTimer {
            metrics: self.clone(),
            tool: tool.to_owned(),
            started: std::time::Instant::now(),
            outcome: None,
        }
    }

    /// A call refused because every slot was busy (it never started).
    pub fn overloaded_call(&self, tool: &str) {
        let labels = CallLabels {
            tool: tool.to_owned(),
            outcome: "overloaded",
        };
        self.inner.tool_calls.get_or_create(&labels).inc();
    }

    /// One answered request (the method counted as one of HTTP's own, any other as `other`,
    /// so that no request adds series): `route` is the route's template (`/v1/files/{*path}`), or
    /// `unmatched`; `error` the type of an error answer.
    pub fn request(
        &self,
        method: &str,
        route: &str,
        status: u16,
        error: Option<ErrorType>,
        took: Duration,
    ) {
        let inner = &self.inner;
        let route = RouteLabels {
            method: method_label(method).to_owned(),
            route: route.to_owned(),
        };
        inner
            .request_duration
            .get_or_create(&route)
            .observe(took.as_secs_f64());
        let labels = RequestLabels {
            method: route.method,
            route: route.route,
            status,
        };
        inner.requests.get_or_create(&labels).inc();
        if status == 429 {
            inner.throttled.inc();
        }
        if let Some(kind) = error {
            if kind == ErrorType::SpawnFailed {
                inner.spawn_failures.inc();
            }
            let error = kind.as_str().to_owned();
            inner.errors.get_or_create(&ErrorLabel { error }).inc();
        }
    }

    /// A snapshot taken (`snapshot`), one taken to list changes (`changes`), or a restore.
    pub fn snapshot(&self, operation: &'static str, took: Duration) {
        self.inner
            .snapshot_duration
            .get_or_create(&OperationLabel { operation })
            .observe(took.as_secs_f64());
    }

    /// The exposition, in the Prometheus text format 0.0.4.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &self.inner.registry)?;
        Ok(text)
    }
}

impl Inner {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "tool_calls",
            "Tool calls by tool and outcome (ok, exit_nonzero, timeout, overloaded, cancelled, or the error type)",
            self.tool_calls.clone(),
        );
        registry.register_with_unit(
            "tool_call_duration",
            "Wall time of tool calls, by tool and outcome",
            Unit::Seconds,
            self.tool_duration.clone(),
        );
        registry.register(
            "tool_calls_in_flight",
            "Tool calls running now",
            self.in_flight.clone(),
        );
        registry.register(
            "http_requests",
            "Answered requests by method, route template and status",
            self.requests.clone(),
        );
        registry.register_with_unit(
            "http_request_duration",
            "Time to answer a request, by method and route template",
            Unit::Seconds,
            self.request_duration.clone(),
        );
        registry.register("errors", "Error answers by type", self.errors.clone());
        registry.register(
            "throttled",
            "Requests refused with 429 (every call slot or the body budget in use)",
            self.throttled.clone(),
        );
        registry.register(
            "spawn_failures",
            "Commands that could not be started",
            self.spawn_failures.clone(),
        );
        registry.register_with_unit(
            "snapshot_duration",
            "Time to take a snapshot (snapshot, changes) or restore an archive (restore)",
            Unit::Seconds,
            self.snapshot_duration.clone(),
        );
    }
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut alive = std::collections::BTreeMap::<&'static str, i64>::new();
        for process in self.processes.list() {
            if process.exit_code.is_none() && process.signal.is_none() {
                *alive.entry(process.kind.as_str()).or_default() += 1;
            }
        }
        let mut family = encoder.encode_descriptor(
            "processes_alive",
            "Managed processes still running, by kind (command, shell, call)",
            None,
            MetricType::Gauge,
        )?;
        for kind in ["command", "shell", "call"] {
            let value = alive.get(kind).copied().unwrap_or(0);
            let labels = [("kind", kind)];
            ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
        }
        let stats = self.artifacts.stats();
        let gauges = [
            ("artifacts_kept", "Output artifacts kept", stats.kept),
            (
                "artifacts_kept_bytes",
                "Bytes of the output artifacts kept",
                stats.kept_bytes,
            ),
        ];
        for (name, help, value) in gauges {
            let value = i64::try_from(value).unwrap_or(i64::MAX);
            ConstGauge::new(value).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Gauge,
            )?)?;
        }
        ConstCounter::new(stats.captured_bytes).encode(encoder.encode_descriptor(
            "captured_bytes",
            "Bytes of command output captured (stdout and stderr, before truncation)",
            None,
            MetricType::Counter,
        )?)?;
        let mut family = encoder.encode_descriptor(
            "protection",
            "1 when a protection is in force on this server's commands, 0 when it could not be applied",
            None,
            MetricType::Gauge,
        )?;
        for protection in self.protections.iter() {
            let labels = [("protection", protection.name.as_str())];
            ConstGauge::new(i64::from(protection.active)).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// A request method as a label: one of HTTP's standard methods, or `other` for anything a
/// client invents (counted before authentication, so it must add no series).
fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "OPTIONS" => "OPTIONS",
        "CONNECT" => "CONNECT",
        "TRACE" => "TRACE",
        _ => "other",
    }
}
