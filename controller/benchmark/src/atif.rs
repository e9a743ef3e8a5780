//! A session log as an ATIF trajectory (Harbor's Agent Trajectory Interchange Format, the
//! latest version its models accept, v1.8): the system prompt and the task as the first two
//! steps, then one agent step per model reply with its tool calls and, in the same step, their
//! results; a compaction is a system step carrying its summary. Totals are the session's.
//!
//! A session with subagents (the `agent` tool) embeds each child's trajectory, recursively, in
//! `subagent_trajectories` (its `trajectory_id` is the child's session id), and the `agent`
//! call's observation result refers to it (`subagent_trajectory_ref`).
//!
//! Any session log converts (`harness replay export --format atif RUN`); a benchmark trial's
//! is written to `agent/trajectory.json` when it ends.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use harness_log::{
    Compaction, Event, LoggedUsage, ModelResponse, Purpose, SessionStarted, StepStarted,
    SubagentStarted, ToolResult,
};
use harness_replay::{self, BlobBudget, ReplayError};

pub const SCHEMA_VERSION: &str = "ATIF-v1.8";
/// The agent's name in trajectories and results.
pub const AGENT_NAME: &str = "agent-harness";

/// The trajectory of the session logged in `dir`.
pub fn from_log(dir: &Path) -> Result<Value, ReplayError> {
    from_log_step(dir, None)
}

/// The trajectory of one step of a multi-step session (`step`), or of the whole session: a
/// step's starts with the system prompt and its own instruction, and its totals are its own.
///
/// Every text is read through one [`BlobBudget`] for the whole export, subagents included: a
/// crafted log naming one big blob many times fails, saying so, instead of holding each copy.
pub fn from_log_step(dir: &Path, step: Option<&str>) -> Result<Value, ReplayError> {
    trajectory(dir, step, 0, &mut 0, &mut BlobBudget::default())
}

/// How deep subagents' logs are followed (a crafted log could link one to itself).
const DEEPEST: usize = 16;

/// The most subagent trajectories one export embeds, at every depth together: a crafted log
/// that names many children at each level would otherwise cost their product.
pub const MOST_EMBEDDED: usize = 1000;

/// The trajectory of the log in `dir`, `depth` below the exported one; `embedded` counts the
/// subagent trajectories embedded so far in the whole export, `budget` the blob bytes read.
fn trajectory(
    dir: &Path,
    step: Option<&str>,
    depth: usize,
    embedded: &mut usize,
    budget: &mut BlobBudget,
) -> Result<Value, ReplayError> {
    let mut builder = Builder {
        only: step.map(str::to_owned),
        ..Builder::default()
    };
    for envelope in harness_replay::events(dir, |_| {})? {
        let envelope = envelope?;
        builder.event(dir, budget, &envelope.ts, &envelope.event)?;
    }
    let children = std::mem::take(&mut builder.children);
    let mut trajectory = builder.finish(dir, budget)?;
    let mut trajectories = Vec::new();
    for (log_dir, session_id) in children {
        if depth >= DEEPEST {
            return Err(ReplayError::Io(format!(
                "{}: subagents nested deeper than {DEEPEST}",
                dir.display()
            )));
        }
        *embedded += 1;
        if *embedded > MOST_EMBEDDED {
            return Err(ReplayError::Io(format!(
                "{}: more than {MOST_EMBEDDED} subagent trajectories to embed in one export (a crafted log?)",
                dir.display()
            )));
        }
        let child_dir = harness_replay::subagent_dir(dir, &log_dir)?;
        let mut child = self::trajectory(&child_dir, None, depth + 1, embedded, budget)?;
        child["trajectory_id"] = json!(session_id);
        trajectories.push(child);
    }
    if !trajectories.is_empty() {
        trajectory["subagent_trajectories"] = Value::Array(trajectories);
    }
    Ok(trajectory)
}

#[derive(Default)]
struct Builder {
    /// The one step to convert, when not the whole session.
    only: Option<String>,
    /// The step the events being read belong to.
    current: Option<String>,
    /// A step's own totals: its replies' usage and cost.
    step_usage: LoggedUsage,
    step_cost: f64,
    header: Option<SessionStarted>,
    header_ts: String,
    steps: Vec<Map<String, Value>>,
    /// The agent step each tool call id belongs to.
    calls: BTreeMap<String, usize>,
    model: Option<String>,
    finished: Option<(LoggedUsage, f64)>,
    /// Subagents, in the order they started: their folder and session id; each folder once
    /// (a crafted log could name one many times).
    children: Vec<(String, String)>,
    /// The folders in `children`.
    seen: std::collections::HashSet<String>,
    /// An `agent` call's child: its session id, folder and workspace.
    child_of_call: BTreeMap<String, (String, String, &'static str)>,
}

impl Builder {
    /// Reads one event of the log into the trajectory. Each kind it converts has its own
    /// method below; this one only decides whether the event belongs to the exported step.
    fn event(
        &mut self,
        dir: &Path,
        budget: &mut BlobBudget,
        ts: &str,
        event: &Event,
    ) -> Result<(), ReplayError> {
        if let Event::StepStarted(step) = event {
            return self.on_step_started(dir, budget, ts, step);
        }
        let ours = self.only.is_none() || self.only == self.current;
        if !ours && !matches!(event, Event::SessionStarted(_) | Event::SessionFinished(_)) {
            return Ok(());
        }
        match event {
            Event::SessionStarted(header) => self.on_session_started(dir, budget, ts, header)?,
            Event::ModelResponse(response) if response.purpose == Purpose::Turn => {
                self.on_model_response(dir, budget, ts, response)?;
            }
            Event::ToolResult(result) => self.on_tool_result(dir, budget, result)?,
            Event::SubagentStarted(started) => self.on_subagent_started(started),
            Event::Compaction(compaction) => self.on_compaction(dir, budget, ts, compaction)?,
            Event::SessionFinished(finished) => {
                self.finished = Some(match self.only {
                    None => (finished.usage, finished.cost),
                    Some(_) => (self.step_usage, self.step_cost),
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// A step begins: the events after it are its own. The exported step starts its
    /// trajectory here; in the whole session a later step's instruction is a user step.
    fn on_step_started(
        &mut self,
        dir: &Path,
        budget: &mut BlobBudget,
        ts: &str,
        step: &StepStarted,
    ) -> Result<(), ReplayError> {
        self.current = Some(step.name.clone());
        let instruction = budget.text(dir, &step.instruction)?;
        if self.only.as_deref() == Some(step.name.as_str()) {
            self.system_prompt(dir, budget, ts)?;
            self.push(ts, "user", &instruction);
        } else if self.only.is_none() && step.index > 1 {
            // The first step's instruction is the session's task, already the first user step.
            self.push(ts, "user", &instruction);
        }
        Ok(())
    }

    /// The header: kept for the trajectory's agent and totals; the whole session's
    /// trajectory starts with its system prompt and task.
    fn on_session_started(
        &mut self,
        dir: &Path,
        budget: &mut BlobBudget,
        ts: &str,
        header: &SessionStarted,
    ) -> Result<(), ReplayError> {
        self.header = Some(header.clone());
        self.header_ts = ts.to_owned();
        self.model = Some(header.config.model.clone());
        if self.only.is_none() {
            self.system_prompt(dir, budget, ts)?;
            self.push(ts, "user", &header.task);
        }
        Ok(())
    }

    /// A model reply of the agent's turn: an agent step with its tool calls, whose results
    /// later land in the same step. Its usage counts toward the step's own totals.
    fn on_model_response(
        &mut self,
        dir: &Path,
        budget: &mut BlobBudget,
        ts: &str,
        response: &ModelResponse,
    ) -> Result<(), ReplayError> {
        self.step_usage.input_tokens += response.usage.input_tokens;
        self.step_usage.cached_input_tokens += response.usage.cached_input_tokens;
        self.step_usage.cache_write_tokens += response.usage.cache_write_tokens;
        self.step_usage.output_tokens += response.usage.output_tokens;
        self.step_cost += response.cost.unwrap_or(0.0);
        let mut step = self.step(ts, "agent", &budget.text(dir, &response.text)?);
        step.insert("model_name".into(), json!(self.model));
        let calls: Vec<Value> = response
            .tool_calls
            .iter()
            .map(|call| {
                json!({
                    "tool_call_id": call.id,
                    "function_name": call.name,
                    "arguments": arguments(&call.arguments),
                })
            })
            .collect();
        if !calls.is_empty() {
            step.insert("tool_calls".into(), Value::Array(calls));
        }
        step.insert("metrics".into(), metrics(&response.usage, response.cost));
        step.insert("llm_call_count".into(), json!(1));
        for call in &response.tool_calls {
            self.calls.insert(call.id.clone(), self.steps.len());
        }
        self.steps.push(step);
        Ok(())
    }

    /// A tool's result, added to the observation of the agent step that made the call; an
    /// `agent` call's result also points at the child's embedded trajectory.
    fn on_tool_result(
        &mut self,
        dir: &Path,
        budget: &mut BlobBudget,
        result: &ToolResult,
    ) -> Result<(), ReplayError> {
        let content = budget.text(dir, &result.output)?;
        if let Some(&at) = self.calls.get(&result.call_id) {
            let mut entry = json!({"source_call_id": result.call_id, "content": content});
            if let Some((session_id, log_dir, workspace)) = self.child_of_call.get(&result.call_id)
            {
                entry["subagent_trajectory_ref"] = json!([{
                    "trajectory_id": session_id,
                    "session_id": session_id,
                    "extra": {"log_dir": log_dir, "workspace": workspace},
                }]);
            }
            let observation = self.steps[at]
                .entry("observation")
                .or_insert_with(|| json!({"results": []}));
            if let Some(results) = observation["results"].as_array_mut() {
                results.push(entry);
            }
        }
        Ok(())
    }

    /// A subagent began: its folder is remembered for embedding, and its call for the
    /// result's reference to it.
    fn on_subagent_started(&mut self, started: &SubagentStarted) {
        // Past the most an export embeds the export fails anyway: no more are kept.
        if self.children.len() <= MOST_EMBEDDED && self.seen.insert(started.log_dir.clone()) {
            self.children
                .push((started.log_dir.clone(), started.session_id.clone()));
        }
        self.child_of_call.insert(
            started.call_id.clone(),
            (
                started.session_id.clone(),
                started.log_dir.clone(),
                started.workspace.as_str(),
            ),
        );
    }

    /// A compaction: a system step carrying its summary and how much it replaced.
    fn on_compaction(
        &mut self,
        dir: &Path,
        budget: &mut BlobBudget,
        ts: &str,
        compaction: &Compaction,
    ) -> Result<(), ReplayError> {
        let summary = budget.text(dir, &compaction.summary)?;
        let mut step = self.step(ts, "system", &summary);
        step.insert(
            "extra".into(),
            json!({"context_management": {"kind": "compaction", "n_replaced": compaction.n_replaced, "n_before": compaction.n_before, "n_after": compaction.n_after}}),
        );
        self.steps.push(step);
        Ok(())
    }

    fn system_prompt(
        &mut self,
        dir: &Path,
        budget: &mut BlobBudget,
        ts: &str,
    ) -> Result<(), ReplayError> {
        let prompt = self.header.as_ref().and_then(|h| h.system_prompt.clone());
        if let Some(prompt) = prompt {
            self.push(ts, "system", &budget.text(dir, &prompt)?);
        }
        Ok(())
    }

    fn step(&self, ts: &str, source: &str, message: &str) -> Map<String, Value> {
        let mut step = Map::new();
        step.insert("step_id".into(), json!(self.steps.len() + 1));
        step.insert("timestamp".into(), json!(ts));
        step.insert("source".into(), json!(source));
        step.insert("message".into(), json!(message));
        step
    }

    fn push(&mut self, ts: &str, source: &str, message: &str) {
        let step = self.step(ts, source, message);
        self.steps.push(step);
    }

    fn finish(self, dir: &Path, budget: &mut BlobBudget) -> Result<Value, ReplayError> {
        let header = self.header.ok_or_else(|| {
            ReplayError::Io(format!("{}: the log has no session_started", dir.display()))
        })?;
        let mut agent = json!({
            "name": AGENT_NAME,
            "version": header.harness_version,
            "model_name": header.config.model,
        });
        if let Some(tools) = &header.tools {
            let specs: Vec<sandbox_protocol::ToolSpec> =
                serde_json::from_slice(&budget.blob(dir, tools)?).unwrap_or_default();
            let definitions: Vec<Value> = specs
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                .collect();
            agent["tool_definitions"] = Value::Array(definitions);
        }
        let n_steps = self.steps.len();
        let mut trajectory = json!({
            "schema_version": SCHEMA_VERSION,
            "session_id": header.session_id,
            "agent": agent,
            "steps": self.steps,
            "extra": {"task_started_at": self.header_ts},
        });
        if let Some((usage, cost)) = self.finished {
            let prompt = usage.input_tokens + usage.cached_input_tokens + usage.cache_write_tokens;
            trajectory["final_metrics"] = json!({
                "total_prompt_tokens": prompt,
                "total_completion_tokens": usage.output_tokens,
                "total_cached_tokens": usage.cached_input_tokens,
                "total_cost_usd": cost,
                "total_steps": n_steps,
            });
        }
        Ok(trajectory)
    }
}

/// A call's arguments as ATIF wants them: an object; anything else is kept under `raw`.
fn arguments(raw: &str) -> Value {
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(object)) => Value::Object(object),
        _ => json!({"raw": raw}),
    }
}

/// A step's metrics: prompt tokens include cached ones, as ATIF counts them.
fn metrics(usage: &LoggedUsage, cost: Option<f64>) -> Value {
    let mut metrics = json!({
        "prompt_tokens": usage.input_tokens + usage.cached_input_tokens + usage.cache_write_tokens,
        "completion_tokens": usage.output_tokens,
        "cached_tokens": usage.cached_input_tokens,
    });
    if let Some(cost) = cost {
        metrics["cost_usd"] = json!(cost);
    }
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_log::testing::{bash_result, blob_text, put_blob, write_events};

    /// A log of `n` tool results whose outputs are all the one blob of `size` bytes.
    fn one_blob_named_many_times(n: u64, size: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let output = blob_text(put_blob(dir.path(), &vec![b'z'; size]));
        let results = (0..n).map(|seq| bash_result(format!("call_{seq}"), output.clone()));
        write_events(dir.path(), results);
        dir
    }

    /// Sixty results naming one blob cost sixty times its size: past the export's budget the
    /// export fails and says why, instead of holding every copy.
    #[test]
    fn one_blob_named_many_times_spends_the_exports_budget() {
        let log = one_blob_named_many_times(60, 1000);
        let mut small = BlobBudget::new(10_000, 1000);
        let err = trajectory(log.path(), None, 0, &mut 0, &mut small)
            .unwrap_err()
            .to_string();
        assert!(err.contains("resolve to more than 10000 bytes"), "{err}");
        // Within its budget the export reads every text, on to the missing header.
        let mut enough = BlobBudget::new(60_000, 1000);
        let err = trajectory(log.path(), None, 0, &mut 0, &mut enough)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no session_started"), "{err}");
        assert_eq!(enough.left(), 0);
    }
}
