//! Regression replay: the recorded tool calls, re-executed in order against a sandbox at the
//! recorded initial state, without a model; any difference in exit code, output (after
//! normalisation) or files changed is a divergence.

use std::collections::BTreeMap;

use regex::Regex;
use sandbox_protocol::{ChangeKind, FileChange, ToolInput, ToolSpec};
use sha2::{Digest, Sha256};

mod subagents;

pub use subagents::{ForkedSandbox, Forker, RecordedChild};

use super::{BlobBudget, ReplayError, events};
use harness_log::{ChangeRecord, Event, ToolStatus};
use harness_models::ToolCall;
use harness_runtime::run_loop::{
    CallOutcome, Parsed, Route, offered, on_mcp, parse_call, run_on_sandbox,
};
use harness_runtime::sandbox::CallOptions;
use harness_runtime::sandbox::{SandboxClient, SandboxError, ToolReply};

/// One recorded call with what it led to.
#[derive(Debug, Clone)]
pub struct RecordedCall {
    pub seq: u64,
    pub call: ToolCall,
    pub allowed: bool,
    /// Absent when the log has no result for the call (a killed session).
    pub status: Option<ToolStatus>,
    pub output: String,
    pub exit_code: Option<i32>,
    /// `(path, change, after sha256)` of the files it changed.
    pub changes: Vec<(String, ChangeKind, Option<String>)>,
    /// An `agent` call's child session, as its own log recorded it.
    pub child: Option<RecordedChild>,
}

/// What a log holds for a rerun.
#[derive(Debug, Clone)]
pub struct Recording {
    pub tools: Vec<ToolSpec>,
    pub workspace_root: Option<String>,
    pub initial_seq: u64,
    pub calls: Vec<RecordedCall>,
}

/// Reads the calls of a session, in order. Their outputs, subagents' included, are read
/// through one [`BlobBudget`]: a crafted log naming one big blob for every call fails, saying
/// so, instead of holding a copy per call.
pub fn load(dir: &std::path::Path) -> Result<Recording, ReplayError> {
    load_at(dir, 0, &mut 0, &mut BlobBudget::default())
}

/// [`load`] of a session `depth` subagents below the one rerun; `loaded` counts the sessions
/// read so far, over the whole tree (a crafted log naming the same child many times at every
/// level would otherwise cost exponential work), `budget` the blob bytes read.
fn load_at(
    dir: &std::path::Path,
    depth: usize,
    loaded: &mut usize,
    budget: &mut BlobBudget,
) -> Result<Recording, ReplayError> {
    let mut loading = Loading {
        dir,
        depth,
        loaded,
        budget,
        recording: Recording {
            tools: Vec::new(),
            workspace_root: None,
            initial_seq: 0,
            calls: Vec::new(),
        },
        by_id: BTreeMap::new(),
        context: BTreeMap::new(),
    };
    for envelope in events(dir, |_| {})? {
        let envelope = envelope?;
        loading.event(envelope.seq, envelope.event)?;
    }
    Ok(loading.recording)
}

/// A log being read for a rerun: its calls so far, found again by id as their events come.
struct Loading<'a> {
    dir: &'a std::path::Path,
    depth: usize,
    loaded: &'a mut usize,
    budget: &'a mut BlobBudget,
    recording: Recording,
    by_id: BTreeMap<String, usize>,
    /// What hooks added to each call's result for the model, to compare the tool's own output.
    context: BTreeMap<usize, Vec<String>>,
}

impl Loading<'_> {
    /// One event into the recording.
    fn event(&mut self, seq: u64, event: Event) -> Result<(), ReplayError> {
        match event {
            Event::SessionStarted(header) => self.header(&header)?,
            Event::WorkspaceSnapshot(_) => self.recording.initial_seq = seq,
            Event::ToolCall(call) => self.call(seq, call),
            // A hook's rewrite is what ran (and what the rules judged): a rerun runs it too.
            Event::HookRun(run) => {
                if let Some(&idx) = run.call_id.as_ref().and_then(|id| self.by_id.get(id)) {
                    let context = self.context.entry(idx).or_default();
                    hooked(&mut self.recording.calls[idx], run, context);
                }
            }
            Event::PolicyDecision(decision) => {
                if let Some(&idx) = self.by_id.get(&decision.call_id) {
                    self.recording.calls[idx].allowed = decision.allowed;
                }
            }
            Event::ToolResult(result) => self.result(&result)?,
            Event::SubagentStarted(started) => self.child(&started)?,
            Event::SubagentFinished(finished) => {
                let child = self
                    .by_id
                    .get(&finished.call_id)
                    .and_then(|&idx| self.recording.calls[idx].child.as_mut());
                if let Some(child) = child {
                    child.merge = finished.merge;
                }
            }
            Event::WorkspaceChanged(changed) => {
                if let Some(&idx) = self.by_id.get(&changed.call_id) {
                    self.recording.calls[idx].changes = summarize(&changed.changes);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The header: the tools the model was offered, and the workspace's root.
    fn header(&mut self, header: &harness_log::SessionStarted) -> Result<(), ReplayError> {
        self.recording.workspace_root = header.config.workspace_root.clone();
        if let Some(tools) = &header.tools {
            self.recording.tools = serde_json::from_slice(&self.budget.blob(self.dir, tools)?)
                .map_err(|err| ReplayError::Io(format!("the tool list of the log: {err}")))?;
        }
        Ok(())
    }

    fn call(&mut self, seq: u64, call: harness_log::ToolCallEvent) {
        self.by_id
            .insert(call.call_id.clone(), self.recording.calls.len());
        self.recording.calls.push(RecordedCall {
            seq,
            call: ToolCall {
                id: call.call_id,
                name: call.name,
                arguments: call.arguments,
            },
            allowed: true,
            status: None,
            output: String::new(),
            exit_code: None,
            changes: Vec::new(),
            child: None,
        });
    }

    /// A call's result: its status, and its output without what the hooks added to it.
    fn result(&mut self, result: &harness_log::ToolResult) -> Result<(), ReplayError> {
        let Some(&idx) = self.by_id.get(&result.call_id) else {
            return Ok(());
        };
        let output = self.budget.text(self.dir, &result.output)?;
        let added = harness_runtime::run_loop::with_context(
            String::new(),
            &self.context.remove(&idx).unwrap_or_default(),
        );
        let call = &mut self.recording.calls[idx];
        call.status = Some(result.status);
        call.output = match output.strip_suffix(&added) {
            Some(own) if !added.is_empty() => own.to_owned(),
            _ => output,
        };
        call.exit_code = result.exit_code;
        Ok(())
    }

    /// A subagent's own recording, read from its log below this one.
    fn child(&mut self, started: &harness_log::SubagentStarted) -> Result<(), ReplayError> {
        // A call starts one subagent: a repeated event for it is not read again.
        let call = self.by_id.get(&started.call_id).copied();
        if let Some(idx) = call.filter(|&idx| self.recording.calls[idx].child.is_none()) {
            let child =
                RecordedChild::load(self.dir, started, self.depth + 1, self.loaded, self.budget)?;
            self.recording.calls[idx].child = Some(child);
        }
        Ok(())
    }
}

/// What a hook's run changes in a recorded call: the arguments it rewrote, the context it
/// added to the result.
fn hooked(call: &mut RecordedCall, run: harness_log::HookRunEvent, context: &mut Vec<String>) {
    if let Some(input) = run.updated_input {
        call.call.arguments = input.to_string();
    }
    context.extend(run.additional_context.filter(|c| !c.trim().is_empty()));
}

fn summarize(changes: &[ChangeRecord]) -> Vec<(String, ChangeKind, Option<String>)> {
    let mut summary: Vec<_> = changes
        .iter()
        .map(|c| {
            (
                c.path.clone(),
                c.change,
                c.after.as_ref().and_then(|a| a.sha256.clone()),
            )
        })
        .collect();
    summary.sort();
    summary
}

/// Rewrites what legitimately differs between runs before outputs are compared.
#[derive(Debug, Clone)]
pub struct Normalizer {
    rules: Vec<(Regex, String)>,
}

impl Normalizer {
    /// Timestamps, pids, temporary paths and the server's call and artifact ids, plus `extra`
    /// patterns (each replaced by `<normalized>`).
    pub fn new(extra: &[String]) -> Result<Normalizer, regex::Error> {
        let defaults = [
            (
                r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?",
                "<timestamp>",
            ),
            (r"\b(pid|PID)( |=|: ?)\d+", "pid <n>"),
            (r"/tmp/[A-Za-z0-9._-]+", "<tmp>"),
            (r"call_[0-9a-f]{16}", "<call>"),
            (r"art_[0-9a-f]{32}", "<artifact>"),
        ];
        let mut rules = Vec::new();
        for (pattern, replacement) in defaults {
            rules.push((Regex::new(pattern)?, replacement.to_owned()));
        }
        for pattern in extra {
            rules.push((Regex::new(pattern)?, "<normalized>".to_owned()));
        }
        Ok(Normalizer { rules })
    }

    pub fn apply(&self, text: &str, workspace_root: Option<&str>) -> String {
        let mut out = match workspace_root {
            Some(root) if !root.is_empty() => text.replace(root, "<workspace>"),
            _ => text.to_owned(),
        };
        for (regex, replacement) in &self.rules {
            out = regex.replace_all(&out, replacement.as_str()).into_owned();
        }
        out
    }
}

/// Where a rerun first differed from the recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    pub seq: u64,
    pub call_id: String,
    pub tool: String,
    /// `status`, `exit_code`, `output` or `changes`.
    pub field: String,
    pub recorded: String,
    pub rerun: String,
    /// The subagent's log (relative to the session's folder) the call is in; empty for the
    /// session's own calls.
    pub log: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RerunReport {
    pub n_calls: u64,
    pub n_skipped: u64,
    /// Calls of MCP servers' tools: their results are the log's (they act outside the
    /// sandbox, so the workspace does not depend on running them again).
    pub n_from_log: u64,
    /// Calls the current policy refused (`seq call_id tool: reason`); they did not run.
    pub refused: Vec<String>,
    pub divergences: Vec<Divergence>,
}

/// How a rerun judges the calls of a log it does not trust: a policy the caller built (the
/// binary's: the rules, no classifier, nobody to ask).
pub struct Check {
    policy: Box<dyn harness_policy::Policy>,
    /// Refuse what the policy would ask about, too.
    refuse_asks: bool,
}

impl Check {
    pub fn new(policy: Box<dyn harness_policy::Policy>, refuse_asks: bool) -> Check {
        Check {
            policy,
            refuse_asks,
        }
    }

    /// Why the call must not run, if it must not.
    async fn refuses(&self, input: &ToolInput, sandbox: &SandboxClient) -> Option<String> {
        use harness_policy::{Call, Decision};
        let judgement = self
            .policy
            .decide(Call {
                request: "",
                input,
                workspace: Some(sandbox),
            })
            .await;
        match judgement.decision {
            Decision::Deny(reason) => Some(reason),
            Decision::Ask(reason) if self.refuse_asks => Some(format!("ask: {reason}")),
            Decision::Ask(_) | Decision::Allow => None,
        }
    }
}

/// What a rerun needs besides the recording and the sandbox.
#[derive(Clone, Copy)]
pub struct Rerun<'a> {
    pub normalizer: &'a Normalizer,
    pub check: Option<&'a Check>,
    pub mcp: Option<&'a harness_runtime::mcp::McpTools>,
    /// Copies of the sandbox for forked subagents; without it, a log with one diverges there.
    pub forker: Option<&'a dyn Forker>,
}

/// Re-executes every recorded call on `sandbox` (already at the initial state) and compares;
/// a subagent's calls are re-executed where it made them (the same sandbox, or a copy).
pub async fn rerun(
    recording: &Recording,
    sandbox: &SandboxClient,
    with: Rerun<'_>,
) -> Result<RerunReport, SandboxError> {
    let Rerun {
        normalizer,
        check,
        mcp,
        ..
    } = with;
    let info = sandbox.info().await?;
    let mut snapshot_id = sandbox.snapshot().await?.snapshot_id;
    let mut report = RerunReport::default();
    let mut at = 0;
    while let Some(recorded) = recording.calls.get(at) {
        at += 1;
        let group = subagents::group(&recording.calls[at - 1..]);
        if !group.is_empty() {
            at += group.len() - 1;
            snapshot_id =
                subagents::rerun_group(group, recording, sandbox, with, &mut report).await?;
            continue;
        }
        if !recorded.allowed {
            // A refused call never ran; its BLOCKED message depends on the policy, not the sandbox.
            report.n_skipped += 1;
            continue;
        }
        let servers = mcp.filter(|m| m.owns(&recorded.call.name));
        if recorded.call.name.starts_with(harness_runtime::mcp::PREFIX) && servers.is_none() {
            report.n_from_log += 1;
            continue;
        }
        // A tool an MCP search loaded is not in the session's first list: only its arguments
        // are checked.
        let parsed = match servers {
            Some(_) => Ok(()),
            None => offered(&recording.tools, &recorded.call),
        }
        .and_then(|()| parse_call(&recorded.call, servers));
        if let Ok(parsed) = &parsed
            && refused(check, recorded, &parsed.input, sandbox, &mut report).await
        {
            continue;
        }
        report.n_calls += 1;
        let outcome = match parsed {
            Err(text) => CallOutcome::text_only(ToolStatus::Error, text),
            Ok(Parsed { input, route }) => match (route, servers) {
                (Route::Mcp, Some(servers)) => on_mcp(servers, &input).await,
                _ => run_on_sandbox(sandbox, &input, &CallOptions::default()).await?,
            },
        };
        let changes = sandbox.changes(&snapshot_id).await?;
        snapshot_id = changes.snapshot_id.clone();
        let again = Again {
            status: outcome.status,
            exit_code: outcome
                .reply
                .as_ref()
                .and_then(ToolReply::bash)
                .map(|result| result.exit_code),
            text: normalizer.apply(&outcome.text, Some(&info.workspace_root)),
            changes: summarize_wire(&changes.changes),
        };
        let recorded_text = normalizer.apply(&recorded.output, recording.workspace_root.as_deref());
        if let Some(divergence) = first_difference(recorded, recorded_text, again) {
            report.divergences.push(divergence);
        }
    }
    Ok(report)
}

/// Whether the current policy refuses the call (it is then listed in the report).
async fn refused(
    check: Option<&Check>,
    recorded: &RecordedCall,
    input: &ToolInput,
    sandbox: &SandboxClient,
    report: &mut RerunReport,
) -> bool {
    let Some(check) = check else { return false };
    let Some(reason) = check.refuses(input, sandbox).await else {
        return false;
    };
    let call = &recorded.call;
    report.refused.push(format!(
        "{} {} {}: {reason}",
        recorded.seq, call.id, call.name
    ));
    true
}

/// What a call did when run again.
struct Again {
    status: ToolStatus,
    exit_code: Option<i32>,
    /// Normalised.
    text: String,
    changes: Vec<(String, ChangeKind, Option<String>)>,
}

/// Status, then exit code, then output, then the files changed: the first that differs.
fn first_difference(
    recorded: &RecordedCall,
    recorded_text: String,
    again: Again,
) -> Option<Divergence> {
    let diverge = |field: &str, recorded_value: String, rerun_value: String| Divergence {
        seq: recorded.seq,
        call_id: recorded.call.id.clone(),
        tool: recorded.call.name.clone(),
        field: field.to_owned(),
        recorded: recorded_value,
        rerun: rerun_value,
        log: String::new(),
    };
    if recorded.status != Some(again.status) {
        Some(diverge(
            "status",
            recorded
                .status
                .map_or("none", ToolStatus::as_str)
                .to_owned(),
            again.status.as_str().to_owned(),
        ))
    } else if recorded.exit_code != again.exit_code {
        Some(diverge(
            "exit_code",
            format!("{:?}", recorded.exit_code),
            format!("{:?}", again.exit_code),
        ))
    } else if hash(&recorded_text) != hash(&again.text) {
        Some(diverge("output", recorded_text, again.text))
    } else if recorded.changes != again.changes {
        Some(diverge(
            "changes",
            show(&recorded.changes),
            show(&again.changes),
        ))
    } else {
        None
    }
}

/// Changes as a divergence shows them, one per line.
fn show(changes: &[(String, ChangeKind, Option<String>)]) -> String {
    changes
        .iter()
        .map(|(path, change, sha)| {
            let change = change.as_str();
            format!("{change} {path} {}", sha.as_deref().unwrap_or("-"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The changes the sandbox reports, as a recording summarises them.
fn summarize_wire(changes: &[FileChange]) -> Vec<(String, ChangeKind, Option<String>)> {
    let mut summary: Vec<_> = changes
        .iter()
        .map(|c| {
            let sha256 = c.after.as_ref().and_then(|a| a.sha256.clone());
            (c.path.clone(), c.change, sha256)
        })
        .collect();
    summary.sort();
    summary
}

fn hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A divergence for a person: where, what, and a diff of recorded against rerun.
pub fn describe(divergence: &Divergence) -> String {
    let diff = harness_log::text::unified_diff(
        &divergence.recorded,
        &divergence.rerun,
        "recorded",
        "rerun",
    );
    let place = match divergence.log.as_str() {
        "" => String::new(),
        log => format!(" of the subagent {log}"),
    };
    format!(
        "first divergence at seq {}{place} ({} `{}`): {} differs\n{diff}",
        divergence.seq, divergence.call_id, divergence.tool, divergence.field
    )
}

#[cfg(test)]
mod tests;
