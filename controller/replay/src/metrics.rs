//! Metrics replay: what a session did and what it cost, from its log alone.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::Serialize;

use super::{ReplayError, events};
use harness_log::{Event, FailureClass, Outcome};

/// How a run ended, as reports show it: its session's outcome, or why it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum RunOutcome {
    /// From `session_finished`.
    Finished(Outcome),
    Unfinished(Unfinished),
}

/// Why a run has no outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unfinished {
    /// The log has no `session_finished`: the harness was killed.
    Incomplete,
    /// A batch's task that never started.
    NotRun,
}

impl Default for RunOutcome {
    fn default() -> RunOutcome {
        RunOutcome::Unfinished(Unfinished::Incomplete)
    }
}

impl RunOutcome {
    /// Its name in reports: the outcome's, or why there is none.
    pub fn as_str(self) -> &'static str {
        sandbox_protocol::names::variant_name(&self)
    }
}

/// One session's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunMetrics {
    pub session_id: String,
    /// From `session_finished`; `incomplete` when the log has none (the harness was killed).
    pub outcome: RunOutcome,
    /// Events in the log.
    pub events: u64,
    pub turns: u32,
    pub model_calls: u64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub cost: f64,
    pub cost_known: bool,
    pub tool_calls: BTreeMap<String, u64>,
    /// Calls the policy (or a hook) refused: `blocked` results.
    pub refused: u64,
    /// The last `error` event's message that was not a tool's (a tool's error is the model's
    /// to handle): why a session that stopped early stopped.
    pub last_error: Option<String>,
    pub tool_latency_ms: BTreeMap<String, Latency>,
    pub errors: BTreeMap<harness_log::ErrorClass, u64>,
    /// The seq of the first `workspace_changed`, and the turn it came in.
    pub first_modification_seq: Option<u64>,
    pub first_modification_turn: Option<u32>,
    pub model_ms: u64,
    pub tool_ms: u64,
    /// `agent` calls: the time their children ran (the children of one group run at once: the
    /// longest counts), not in `tool_ms`.
    pub subagent_ms: u64,
    /// What the session's subagents spent (`session_finished.subagents`), not in `cost`.
    pub subagents: u32,
    pub subagent_cost: f64,
    /// Everything else: the harness itself, the sandbox's bookkeeping, the log.
    pub harness_ms: u64,
    pub total_ms: u64,
    pub check_passed: Option<bool>,
    /// A benchmark task's verifier: the reward a pass is judged by.
    pub reward: Option<f64>,
    /// Building (or finding) a benchmark task's images, and its verifier.
    pub build_ms: u64,
    pub verifier_ms: u64,
    /// `oracle` or `nop` for those agents of a benchmark task; absent for a model.
    pub agent: Option<String>,
    /// Whether it ran a benchmark task (Harbor, Terminal-Bench).
    pub benchmark: bool,
    /// A benchmark task its author marks broken on purpose (`[metadata] expected_broken`).
    pub expected_broken: Option<String>,
    /// From `session_finished`: why it did not pass.
    pub failure: Option<FailureClass>,
    pub torn_lines: u64,
    /// Every tool call's duration, for percentiles pooled over many runs.
    #[serde(skip)]
    pub tool_samples_ms: BTreeMap<String, Vec<u64>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Latency {
    pub p50: u64,
    pub p95: u64,
    pub max: u64,
}

/// The median, 95th percentile and maximum of `samples` (the report's and the viewer's).
pub fn latency(mut samples: Vec<u64>) -> Latency {
    if samples.is_empty() {
        return Latency::default();
    }
    samples.sort_unstable();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    Latency {
        p50: at(0.5),
        p95: at(0.95),
        max: *samples.last().unwrap_or(&0),
    }
}

/// An event's timestamp as milliseconds since the epoch.
pub(crate) fn millis(ts: &str) -> Option<u128> {
    humantime::parse_rfc3339_weak(ts)
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis())
}

impl RunMetrics {
    /// A model reply: its tokens, cost and time.
    fn reply(&mut self, response: &harness_log::ModelResponse) {
        self.model_calls += 1;
        self.turns = self.turns.max(response.turn);
        self.input_tokens += response.usage.input_tokens;
        self.cached_input_tokens += response.usage.cached_input_tokens;
        self.output_tokens += response.usage.output_tokens;
        match response.cost {
            Some(cost) => self.cost += cost,
            None => self.cost_known = false,
        }
        self.model_ms += response.latency_ms;
    }

    /// The header's agent and benchmark, the images' build time and the verifier's verdict.
    fn benchmark_event(&mut self, event: Event) {
        match event {
            Event::SessionStarted(header) => {
                self.session_id = header.session_id;
                self.agent = header.config.agent;
                self.expected_broken = header
                    .config
                    .benchmark
                    .as_ref()
                    .and_then(|b| b.expected_broken.clone());
                self.benchmark = header.config.benchmark.is_some();
            }
            Event::ImageBuilt(image) => self.build_ms += image.duration_ms,
            Event::VerifierFinished(verifier) => {
                // A step's reward is not the task's: its steps' make that (`steps_finished`).
                if verifier.step.is_none() {
                    self.reward = verifier.reward;
                }
                self.verifier_ms += verifier.duration_ms;
            }
            Event::StepsFinished(steps) => self.reward = steps.reward,
            _ => {}
        }
    }
}

/// Reads one session's log, streaming.
pub fn measure(dir: &Path) -> Result<RunMetrics, ReplayError> {
    let mut tally = Tally::new();
    let mut torn = 0;
    for envelope in events(dir, |_| torn += 1)? {
        tally.envelope(envelope?);
    }
    Ok(tally.finish(dir, torn))
}

/// What `measure` gathers while it reads: the figures so far, and what the last ones are made
/// of once the log ends.
struct Tally {
    metrics: RunMetrics,
    samples: BTreeMap<String, Vec<u64>>,
    first_ts: Option<u128>,
    last_ts: Option<u128>,
    finished_ms: Option<u64>,
    /// The turn of the last model request: the turn a change came in.
    turn: u32,
    /// The longest `agent` call of the group being read.
    group_ms: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            metrics: RunMetrics {
                cost_known: true,
                ..RunMetrics::default()
            },
            samples: BTreeMap::new(),
            first_ts: None,
            last_ts: None,
            finished_ms: None,
            turn: 0,
            group_ms: 0,
        }
    }

    /// One event: its time, the end of an `agent` group it shows, then what it counts.
    fn envelope(&mut self, envelope: harness_log::Envelope) {
        self.metrics.events += 1;
        if self.first_ts.is_none() {
            self.first_ts = millis(&envelope.ts);
        }
        self.last_ts = millis(&envelope.ts).or(self.last_ts);
        let agent_result = matches!(&envelope.event, Event::ToolResult(r) if harness_runtime::subagent::is_agent_tool(&r.name));
        if !agent_result
            && matches!(
                envelope.event,
                Event::ToolResult(_) | Event::ModelRequest(_)
            )
        {
            self.metrics.subagent_ms += std::mem::take(&mut self.group_ms);
        }
        self.event(envelope.seq, envelope.event, agent_result);
    }

    /// What one event adds to the figures. Its own step: the match is long, and the
    /// bookkeeping of times before it is the same for every event.
    fn event(&mut self, seq: u64, event: Event, agent_result: bool) {
        let metrics = &mut self.metrics;
        match event {
            Event::ToolResult(result) if agent_result => {
                *metrics.tool_calls.entry(result.name.clone()).or_default() += 1;
                self.group_ms = self.group_ms.max(result.duration_ms);
            }
            Event::ModelRequest(request) => self.turn = request.turn,
            Event::ModelResponse(response) => metrics.reply(&response),
            Event::ToolResult(result) => {
                *metrics.tool_calls.entry(result.name.clone()).or_default() += 1;
                if result.status == harness_log::ToolStatus::Blocked {
                    metrics.refused += 1;
                }
                self.samples
                    .entry(result.name)
                    .or_default()
                    .push(result.duration_ms);
                metrics.tool_ms += result.duration_ms;
            }
            Event::WorkspaceChanged(_) if metrics.first_modification_seq.is_none() => {
                metrics.first_modification_seq = Some(seq);
                metrics.first_modification_turn = Some(self.turn);
            }
            Event::Error(error) => {
                *metrics.errors.entry(error.class).or_default() += 1;
                if error.class != harness_log::ErrorClass::Tool {
                    metrics.last_error = Some(error.message);
                }
            }
            Event::CheckResult(check) => metrics.check_passed = Some(check.passed),
            Event::SessionFinished(finished) => {
                metrics.outcome = RunOutcome::Finished(finished.outcome);
                metrics.failure = finished.failure;
                self.finished_ms = Some(finished.duration_ms);
                if let Some(theirs) = finished.subagents {
                    metrics.subagents = theirs.count;
                    metrics.subagent_cost = theirs.cost;
                }
            }
            other => metrics.benchmark_event(other),
        }
    }

    /// The figures made once the log ends: latencies, the total time and what is left of it
    /// for the harness, and a session id from the folder when the header had none.
    fn finish(self, dir: &Path, torn: u64) -> RunMetrics {
        let Tally {
            mut metrics,
            samples,
            first_ts,
            last_ts,
            finished_ms,
            group_ms,
            ..
        } = self;
        metrics.subagent_ms += group_ms;
        metrics.torn_lines = torn;
        metrics.tool_latency_ms = samples
            .iter()
            .map(|(tool, values)| (tool.clone(), latency(values.clone())))
            .collect();
        metrics.tool_samples_ms = samples;
        metrics.total_ms = finished_ms.unwrap_or_else(|| match (first_ts, last_ts) {
            (Some(first), Some(last)) => (last - first) as u64,
            _ => 0,
        });
        metrics.harness_ms = metrics.total_ms.saturating_sub(
            metrics.model_ms
                + metrics.tool_ms
                + metrics.subagent_ms
                + metrics.build_ms
                + metrics.verifier_ms,
        );
        if metrics.session_id.is_empty() {
            metrics.session_id = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        metrics
    }
}

/// One row per run, then totals; every tool's latency below, and where the time went.
pub fn write_table(runs: &[RunMetrics], out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<28} {:<13} {:>6} {:>6} {:>6} {:>10} {:>10} {:>10} {:>8} {:>6} {:>9}",
        "session",
        "outcome",
        "events",
        "turns",
        "tools",
        "in tok",
        "out tok",
        "cost $",
        "time s",
        "errors",
        "1st edit"
    )?;
    for run in runs {
        write_row(run, out)?;
    }
    if runs.len() > 1 {
        write_totals(runs, out)?;
    }
    write_tool_latency(runs, out)?;
    write_time_split(runs, out)
}

fn write_row(run: &RunMetrics, out: &mut dyn Write) -> std::io::Result<()> {
    let cost = if run.cost_known {
        format!("{:.4}", run.cost)
    } else {
        format!("≥{:.4}", run.cost)
    };
    writeln!(
        out,
        "{:<28} {:<13} {:>6} {:>6} {:>6} {:>10} {:>10} {:>10} {:>8.1} {:>6} {:>9}",
        run.session_id,
        run.outcome.as_str(),
        run.events,
        run.turns,
        run.tool_calls.values().sum::<u64>(),
        run.input_tokens + run.cached_input_tokens,
        run.output_tokens,
        cost,
        run.total_ms as f64 / 1000.0,
        run.errors.values().sum::<u64>(),
        run.first_modification_seq
            .map(|seq| seq.to_string())
            .unwrap_or_else(|| "-".to_owned()),
    )
}

fn write_totals(runs: &[RunMetrics], out: &mut dyn Write) -> std::io::Result<()> {
    let completed = runs
        .iter()
        .filter(|r| r.outcome == RunOutcome::Finished(Outcome::Completed))
        .count();
    let sum = |f: &dyn Fn(&RunMetrics) -> u64| runs.iter().map(f).sum::<u64>();
    writeln!(
        out,
        "{:<28} {:<13} {:>6} {:>6} {:>6} {:>10} {:>10} {:>10.4} {:>8.1} {:>6}",
        format!("total ({} runs)", runs.len()),
        format!("{completed} completed"),
        sum(&|r| r.events),
        sum(&|r| u64::from(r.turns)),
        sum(&|r| r.tool_calls.values().sum::<u64>()),
        sum(&|r| r.input_tokens + r.cached_input_tokens),
        sum(&|r| r.output_tokens),
        runs.iter().map(|r| r.cost).sum::<f64>(),
        sum(&|r| r.total_ms) as f64 / 1000.0,
        sum(&|r| r.errors.values().sum::<u64>()),
    )
}

fn write_tool_latency(runs: &[RunMetrics], out: &mut dyn Write) -> std::io::Result<()> {
    let mut per_tool: BTreeMap<&str, (u64, Vec<Latency>)> = BTreeMap::new();
    for run in runs {
        for (tool, n) in &run.tool_calls {
            let entry = per_tool.entry(tool).or_default();
            entry.0 += n;
            entry.1.extend(run.tool_latency_ms.get(tool).copied());
        }
    }
    if per_tool.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\n{:<20} {:>7} {:>9} {:>9} {:>9}",
        "tool", "calls", "p50 ms", "p95 ms", "max ms"
    )?;
    for (tool, (n, latencies)) in per_tool {
        let worst = |f: fn(&Latency) -> u64| latencies.iter().map(f).max().unwrap_or(0);
        writeln!(
            out,
            "{tool:<20} {n:>7} {:>9} {:>9} {:>9}",
            worst(|l| l.p50),
            worst(|l| l.p95),
            worst(|l| l.max)
        )?;
    }
    if runs.len() > 1 {
        writeln!(
            out,
            "(over several runs the percentiles shown are the worst run's)"
        )?;
    }
    Ok(())
}

fn write_time_split(runs: &[RunMetrics], out: &mut dyn Write) -> std::io::Result<()> {
    let sum = |f: fn(&RunMetrics) -> u64| runs.iter().map(f).sum::<u64>();
    let parts = [
        ("model", sum(|r| r.model_ms)),
        ("tools", sum(|r| r.tool_ms)),
        ("images", sum(|r| r.build_ms)),
        ("verifier", sum(|r| r.verifier_ms)),
        ("harness", sum(|r| r.harness_ms)),
    ];
    let total = parts.iter().map(|(_, ms)| ms).sum::<u64>().max(1) as f64;
    let shown: Vec<String> = parts
        .iter()
        .filter(|(name, ms)| *ms > 0 || matches!(*name, "model" | "tools" | "harness"))
        .map(|(name, ms)| {
            format!(
                "{name} {:.1} s ({:.0}%)",
                *ms as f64 / 1000.0,
                100.0 * *ms as f64 / total
            )
        })
        .collect();
    writeln!(out, "\ntime: {}", shown.join(", "))
}
