//! What a run or a batch tells its operators while it goes: Prometheus metrics (tasks by state
//! and outcome, attempts, model calls, tokens and cost by provider and model, rate-gate waits,
//! 429s, sandbox start latency by provider, warm-pool hits, tool calls and policy verdicts),
//! served by [`serve`] for `--metrics-listen`. Spans go out through the `otel` crate.
//!
//! One registry per process: a process runs one `harness` command, and every session in it
//! adds to the same series.
//!
//! # This crate (`harness-telemetry`)
//! The controller's metrics registry and its endpoint. It depends on no crate of the harness:
//! the model adapters, the runtime and the batch count into it; it knows none of their types.

mod serve;

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

pub use serve::{MetricsServer, serve};

/// The exposition's media type.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    provider: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    provider: String,
    model: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: String,
    model: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabel {
    endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    tool: String,
    verdict: &'static str,
}

/// The controller's metrics; [`metrics`] gives the process's one instance.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    tasks: Family<StateLabel, Gauge>,
    task_outcomes: Family<OutcomeLabel, Counter>,
    attempts: Family<OutcomeLabel, Counter>,
    model_calls: Family<CallLabels, Counter>,
    model_duration: Family<ModelLabels, Histogram>,
    tokens: Family<TokenLabels, Counter>,
    cost: Family<ModelLabels, Counter<f64, AtomicU64>>,
    gate_wait: Family<EndpointLabel, Counter<f64, AtomicU64>>,
    throttled: Family<EndpointLabel, Counter>,
    sandbox_starts: Family<ProviderLabels, Counter>,
    sandbox_start_duration: Family<ProviderLabels, Histogram>,
    warm_pool: Family<ResultLabel, Counter>,
    tool_calls: Family<ToolLabels, Counter>,
    tool_duration: Family<ToolLabels, Histogram>,
    decisions: Family<VerdictLabels, Counter>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

fn model_seconds() -> Histogram {
    Histogram::new(MODEL_BUCKETS.iter().copied())
}

fn start_seconds() -> Histogram {
    Histogram::new(START_BUCKETS.iter().copied())
}

fn tool_seconds() -> Histogram {
    Histogram::new(TOOL_BUCKETS.iter().copied())
}

const MODEL_BUCKETS: &[f64] = &[
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0,
];
const START_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];
const TOOL_BUCKETS: &[f64] = &[0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0];

/// How a task's progress stands, for the `harness_tasks` gauge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskCounts {
    pub pending: usize,
    pub running: usize,
    pub done: usize,
    pub skipped: usize,
}

impl Metrics {
    fn new() -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::default(),
            tasks: Family::default(),
            task_outcomes: Family::default(),
            attempts: Family::default(),
            model_calls: Family::default(),
            model_duration: Family::new_with_constructor(model_seconds),
            tokens: Family::default(),
            cost: Family::default(),
            gate_wait: Family::default(),
            throttled: Family::default(),
            sandbox_starts: Family::default(),
            sandbox_start_duration: Family::new_with_constructor(start_seconds),
            warm_pool: Family::default(),
            tool_calls: Family::default(),
            tool_duration: Family::new_with_constructor(tool_seconds),
            decisions: Family::default(),
        };
        let mut registry = Registry::with_prefix("harness");
        metrics.register(&mut registry);
        metrics.registry = registry;
        metrics
    }

    fn register(&self, r: &mut Registry) {
        r.register(
            "tasks",
            "Tasks of the batch by state (pending, running, done, skipped)",
            self.tasks.clone(),
        );
        r.register(
            "task_outcomes",
            "Finished tasks by outcome",
            self.task_outcomes.clone(),
        );
        r.register(
            "attempts",
            "Task attempts by outcome (a retried attempt counts too)",
            self.attempts.clone(),
        );
        self.register_models(r);
    }

    fn register_models(&self, r: &mut Registry) {
        r.register(
            "model_calls",
            "Model calls by provider, model and outcome (ok, error)",
            self.model_calls.clone(),
        );
        r.register_with_unit(
            "model_call_duration",
            "Model call latency, retries and gate waits included",
            Unit::Seconds,
            self.model_duration.clone(),
        );
        r.register(
            "model_tokens",
            "Tokens by provider, model and kind (input, cached_input, cache_write, output)",
            self.tokens.clone(),
        );
        r.register(
            "model_cost_usd",
            "Cost of model calls in US dollars, where the price is known",
            self.cost.clone(),
        );
        r.register_with_unit(
            "rate_gate_wait",
            "Time model calls waited at a rate gate, by endpoint",
            Unit::Seconds,
            self.gate_wait.clone(),
        );
        r.register(
            "model_throttled",
            "Model answers with HTTP 429, by endpoint",
            self.throttled.clone(),
        );
        r.register(
            "sandbox_starts",
            "Sandboxes started by provider and outcome",
            self.sandbox_starts.clone(),
        );
        r.register_with_unit(
            "sandbox_start_duration",
            "Time to start a sandbox and see it healthy, by provider",
            Unit::Seconds,
            self.sandbox_start_duration.clone(),
        );
        r.register(
            "warm_pool_leases",
            "Docker sandboxes leased from the warm pool (hit) or started on demand (miss)",
            self.warm_pool.clone(),
        );
        r.register(
            "tool_calls",
            "Tool calls by tool and status (ok, error, blocked)",
            self.tool_calls.clone(),
        );
        r.register_with_unit(
            "tool_call_duration",
            "Tool call latency seen by the controller (policy included)",
            Unit::Seconds,
            self.tool_duration.clone(),
        );
        r.register(
            "policy_decisions",
            "Policy verdicts by tool (allow, deny, ask_allowed, ask_denied)",
            self.decisions.clone(),
        );
    }

    /// The batch's tasks by state.
    pub fn tasks(&self, counts: TaskCounts) {
        for (state, n) in [
            ("pending", counts.pending),
            ("running", counts.running),
            ("done", counts.done),
            ("skipped", counts.skipped),
        ] {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            self.tasks.get_or_create(&StateLabel { state }).set(n);
        }
    }

    /// A task finished with `outcome` (`passed`, `failed`, `error`, …).
    pub fn task_finished(&self, outcome: &str) {
        let outcome = outcome.to_owned();
        self.task_outcomes
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// An attempt ended with `outcome`.
    pub fn attempt(&self, outcome: &str) {
        let outcome = outcome.to_owned();
        self.attempts.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// A model call answered (or failed after its retries); `answer` is its tokens by kind and
    /// its cost.
    pub fn model_call(
        &self,
        model: &ModelId,
        took: Duration,
        answer: Option<(&TokensByKind, Option<f64>)>,
    ) {
        let labels = ModelLabels {
            provider: model.provider.clone(),
            model: model.model.clone(),
        };
        self.model_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        let outcome = if answer.is_some() { "ok" } else { "error" };
        let call = CallLabels {
            provider: labels.provider.clone(),
            model: labels.model.clone(),
            outcome,
        };
        self.model_calls.get_or_create(&call).inc();
        let Some((tokens_by_kind, cost)) = answer else {
            return;
        };
        for &(kind, n) in tokens_by_kind {
            let tokens = TokenLabels {
                provider: labels.provider.clone(),
                model: labels.model.clone(),
                kind,
            };
            self.tokens.get_or_create(&tokens).inc_by(n);
        }
        if let Some(cost) = cost {
            self.cost.get_or_create(&labels).inc_by(cost);
        }
    }

    /// A model call waited `waited` at the rate gate of `endpoint`.
    pub fn gate_waited(&self, endpoint: &str, waited: Duration) {
        let endpoint = endpoint.to_owned();
        self.gate_wait
            .get_or_create(&EndpointLabel { endpoint })
            .inc_by(waited.as_secs_f64());
    }

    /// A model endpoint answered 429.
    pub fn model_throttled(&self, endpoint: &str) {
        let endpoint = endpoint.to_owned();
        self.throttled
            .get_or_create(&EndpointLabel { endpoint })
            .inc();
    }

    /// A sandbox of `provider` (local, docker, task, remote, pool) started, or failed to.
    pub fn sandbox_started(&self, provider: &'static str, took: Duration, ok: bool) {
        let labels = ProviderLabels {
            provider,
            outcome: if ok { "ok" } else { "error" },
        };
        self.sandbox_starts.get_or_create(&labels).inc();
        if ok {
            self.sandbox_start_duration
                .get_or_create(&labels)
                .observe(took.as_secs_f64());
        }
    }

    /// A Docker sandbox came ready from the warm pool (`hit`) or was started on demand.
    pub fn warm_pool(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.warm_pool.get_or_create(&ResultLabel { result }).inc();
    }

    /// A tool call ended with `status` (`ok`, `error`, `blocked`).
    pub fn tool_call(&self, tool: &str, status: &'static str, took: Duration) {
        let labels = ToolLabels {
            tool: tool.to_owned(),
            status,
        };
        self.tool_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.tool_calls.get_or_create(&labels).inc();
    }

    /// The policy's verdict on a call, as settled (an `ask` answered by a person or a rule).
    pub fn policy_decision(&self, tool: &str, verdict: &'static str) {
        let labels = VerdictLabels {
            tool: tool.to_owned(),
            verdict,
        };
        self.decisions.get_or_create(&labels).inc();
    }

    /// The exposition, in the Prometheus text format 0.0.4.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

/// A model's provider and name, as labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelId {
    pub provider: String,
    pub model: String,
}

impl ModelId {
    /// From a model's description (`openai/gpt-5 (Responses API at …)`, `script:turns.yaml (…)`).
    pub fn from_description(text: &str) -> ModelId {
        let head = text.split(" (").next().unwrap_or(text).trim();
        // `provider/model` or `provider:model`, split at whichever comes first.
        let (provider, model) = match head.find(['/', ':']) {
            Some(at) => (&head[..at], &head[at + 1..]),
            None => ("unknown", head),
        };
        ModelId {
            provider: provider.to_owned(),
            model: model.to_owned(),
        }
    }
}

/// A reply's tokens by kind (`input`, `cached_input`, `cache_write`, `output`).
pub type TokensByKind = [(&'static str, u64)];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_names_provider_and_model() {
        let id = ModelId::from_description("openai/gpt-5 (Responses API at https://x/v1)");
        assert_eq!(
            (id.provider.as_str(), id.model.as_str()),
            ("openai", "gpt-5")
        );
        let id = ModelId::from_description("anthropic/claude-x/y (Messages API)");
        assert_eq!(
            (id.provider.as_str(), id.model.as_str()),
            ("anthropic", "claude-x/y")
        );
        let id = ModelId::from_description("script:tasks/turns.yaml (a scripted model: …)");
        assert_eq!(
            (id.provider.as_str(), id.model.as_str()),
            ("script", "tasks/turns.yaml")
        );
    }

    #[test]
    fn counters_show_in_the_exposition() {
        let metrics = Metrics::new();
        let id = ModelId::from_description("openai/m (x)");
        let tokens = [
            ("input", 10),
            ("cached_input", 0),
            ("cache_write", 0),
            ("output", 3),
        ];
        metrics.model_call(&id, Duration::from_millis(20), Some((&tokens, Some(0.5))));
        metrics.model_call(&id, Duration::from_millis(20), None);
        metrics.tasks(TaskCounts {
            pending: 2,
            running: 1,
            done: 3,
            skipped: 0,
        });
        let text = metrics.encode();
        for line in [
            r#"harness_model_calls_total{provider="openai",model="m",outcome="ok"} 1"#,
            r#"harness_model_calls_total{provider="openai",model="m",outcome="error"} 1"#,
            r#"harness_model_tokens_total{provider="openai",model="m",kind="input"} 10"#,
            r#"harness_model_tokens_total{provider="openai",model="m",kind="output"} 3"#,
            r#"harness_model_cost_usd_total{provider="openai",model="m"} 0.5"#,
            r#"harness_model_call_duration_seconds_count{provider="openai",model="m"} 2"#,
            r#"harness_tasks{state="pending"} 2"#,
            r#"harness_tasks{state="done"} 3"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
    }
}
