//! A child session made from its parent's: the same config but the sub-task, no setup and no
//! check, the parent's effective MCP servers, the tree's budget; its own log under the
//! parent's (`agents/<n>-<call id>/`), linked both ways; its workspace the parent's (shared:
//! the shared children of one session take turns) or a copy ([`super::fork`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::fork::{self, Forked};
use super::tree::Tree;
use super::{AgentArgs, WorkspaceMode};
use crate::mcp::McpConfig;
use crate::run_loop::{Child, ChildReport, Observer, Spawn, Totals};
use crate::sandbox::SandboxClient;
use crate::session::{Audience, SessionOptions, SessionOutcome, SessionSummary, run_session};
use harness_log::{EventLog, SubagentFinished, SubagentOf, SubagentStarted, ToolStatus};
use harness_models::{Model, ToolCall};
use harness_policy::Asker;

/// The most of a child's answer the parent's model is shown; the rest is in its log.
const ANSWER_SHOWN: usize = 32 * 1024;

/// What makes a session a subagent (`SessionOptions::subagent`).
#[derive(Debug, Clone)]
pub struct ChildOf {
    pub tree: Arc<Tree>,
    /// Its parent and its depth (1 for a child of the user's session).
    pub link: SubagentOf,
    /// The sandbox it works in: its parent's, or its copy.
    pub client: SandboxClient,
    /// That sandbox's token, kept out of the child's log like its parent's.
    pub token: String,
    /// The parent's blobs: the workspace's files are linked from there, not fetched again.
    pub blob_source: PathBuf,
    /// Why the parent stopped, said before it stops its children.
    pub parent_stop: Arc<std::sync::OnceLock<String>>,
}

/// The children of one session.
pub struct Spawner<'a> {
    pub tree: Arc<Tree>,
    /// This session's depth (0: the user's).
    pub depth: u32,
    pub options: &'a SessionOptions,
    pub model: &'a Arc<dyn Model>,
    pub audience: Audience<'a>,
    /// This session's sandbox.
    pub client: &'a SandboxClient,
    pub log: &'a EventLog,
    /// The MCP servers this session has (the workspace's `.mcp.json` read once, here).
    pub mcp: Arc<McpConfig>,
    /// Cancelled when this session stops: its children stop too.
    pub cancel: &'a CancellationToken,
    /// Why this session stopped, set before `cancel` is.
    pub stop_reason: Arc<std::sync::OnceLock<String>>,
    /// Groups running now (the session drains them before it ends).
    pub groups: &'a AtomicUsize,
    /// `--agent-parallel`.
    pub parallel: tokio::sync::Semaphore,
    /// Held by a shared child for its whole session: shared siblings take turns.
    pub shared: tokio::sync::Mutex<()>,
    /// One ask of a person at a time, whichever child asks.
    pub asks: tokio::sync::Mutex<()>,
}

/// A prepared child, as the spawner keeps it between `prepare`, `run` and `merge`.
struct Pending {
    options: SessionOptions,
    model: Arc<dyn Model>,
    started: SubagentStarted,
    forked: Option<Forked>,
}

/// A finished child's copy, until it is merged.
struct Merging {
    forked: Option<fork::Changes>,
}

impl Spawner<'_> {
    fn make(&self, call: &ToolCall, number: u64, args: &AgentArgs) -> Result<Pending, String> {
        let mode = args.workspace.unwrap_or(self.tree.limits.workspace);
        let model = match self.model.subagent(&call.id) {
            Ok(Some(model)) => model,
            Ok(None) => self.model.clone(),
            Err(err) => return Err(format!("its model: {err}")),
        };
        let name: String = call
            .id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            .take(48)
            .collect();
        let relative = format!("agents/{number}-{name}");
        let log_dir = self.options.log_dir.join(&relative);
        let session_id = harness_log::new_session_id();
        let depth = self.depth + 1;
        let parent = &self.options.config;
        let mut config = parent.clone();
        config.prompt = args.task.clone();
        config.setup = Vec::new();
        config.check = None;
        config.workspace = None;
        config.known_files = None;
        config.keep_workspace = false;
        // The parent's stop reaches its children; the tree's budget is the root's.
        config.lifetime = None;
        config.limits.max_cost = self.tree.max_cost;
        config.mcp = self.mcp.clone();
        config.mcp_workspace = false;
        let link = SubagentOf {
            session_id: self.options.session_id.clone(),
            log_dir: self.options.log_dir.display().to_string(),
            call_id: call.id.clone(),
            depth,
            workspace: mode,
        };
        let child = ChildOf {
            tree: self.tree.clone(),
            link,
            client: self.client.clone(),
            token: self.client.token().unwrap_or_default().to_owned(),
            blob_source: self.options.log_dir.join("blobs"),
            parent_stop: Arc::clone(&self.stop_reason),
        };
        let options = SessionOptions {
            config,
            session_id: session_id.clone(),
            log_dir,
            durability: self.options.durability,
            sandbox_log_in_folder: true,
            gates: self.options.gates.clone(),
            lease: None,
            warm: None,
            build_policy: self.options.build_policy,
            resume: None,
            subagent: Some(child),
        };
        let task = self
            .log
            .text(&args.task)
            .map_err(|err| format!("logging its task: {err}"))?;
        let started = SubagentStarted {
            call_id: call.id.clone(),
            session_id,
            log_dir: relative,
            depth,
            workspace: mode,
            task,
        };
        Ok(Pending {
            options,
            model,
            started,
            forked: None,
        })
    }

    async fn run_child(&self, pending: Pending) -> ChildReport {
        let Pending {
            options,
            model,
            started,
            forked,
        } = pending;
        let _permit = self.parallel.acquire().await;
        let _turn = match forked {
            None => Some(self.shared.lock().await),
            Some(_) => None,
        };
        let label = format!("agent {}", started.log_dir.trim_start_matches("agents/"));
        let labelled = Labelled {
            inner: self.audience.observer,
            label: &label,
        };
        let asker = Serial {
            inner: self.audience.asker,
            lock: &self.asks,
        };
        let audience = Audience {
            observer: &labelled,
            asker: &asker,
        };
        labelled.note(&format!(
            "started ({} workspace): {}",
            started.workspace.as_str(),
            first_line(&options.config.prompt)
        ));
        let totals = Mutex::new(Totals::default());
        let summary =
            run_session(options, model, audience, &totals, self.cancel.child_token()).await;
        labelled.note(&format!(
            "{} after {}",
            summary.outcome.logged().as_str(),
            harness_log::text::plural(summary.totals.turns, "turn")
        ));
        let changes = match forked {
            Some(forked) => Some(forked.finish(&summary.log_dir, self.log).await),
            None => None,
        };
        report(&started, &summary, Merging { forked: changes })
    }
}

/// The record of a session's end, its `session_finished` or its parent's `subagent_finished`
/// (the struct `$kind`), from its [`SessionSummary`] `$summary`: the outcome, totals and
/// duration both have, and the `$field`s only `$kind` has.
macro_rules! finished_record {
    ($kind:ident, $summary:expr, { $($field:ident: $value:expr),* $(,)? }) => {{
        let summary: &$crate::session::SessionSummary = $summary;
        let totals = summary.totals;
        $kind {
            $($field: $value,)*
            outcome: summary.outcome.logged(),
            failure: summary.outcome.failure_class(),
            turns: totals.turns,
            model_calls: totals.model_calls,
            tool_calls: totals.tool_calls,
            usage: totals.usage,
            cost: totals.cost,
            cost_known: totals.cost_known,
            duration_ms: summary.duration.as_millis() as u64,
            subagents: (totals.subagents.count > 0).then_some(totals.subagents),
        }
    }};
}
pub(crate) use finished_record;

/// The call's result and `subagent_finished`.
fn report(started: &SubagentStarted, summary: &SessionSummary, merging: Merging) -> ChildReport {
    let totals = summary.totals;
    let status = match summary.outcome {
        SessionOutcome::Completed
        | SessionOutcome::TurnLimit
        | SessionOutcome::CostLimit
        | SessionOutcome::TimeLimit => ToolStatus::Ok,
        SessionOutcome::Interrupted => ToolStatus::Interrupted,
        _ => ToolStatus::Error,
    };
    let mut text = format!(
        "[subagent {}: {}, {}, ${:.2}]",
        started.log_dir,
        summary.outcome.logged().as_str(),
        harness_log::text::plural(totals.turns, "turn"),
        totals.cost_with_subagents()
    );
    if status == ToolStatus::Error {
        text = format!("ERROR: {text}");
    }
    if let Some(reason) = &summary.reason {
        text.push_str(&format!("\n{reason}"));
    }
    if !summary.answer.is_empty() {
        text.push('\n');
        text.push_str(harness_log::text::head(&summary.answer, ANSWER_SHOWN));
        if summary.answer.len() > ANSWER_SHOWN {
            text.push_str(&format!(
                "\n[… {} more bytes in its log]",
                summary.answer.len() - ANSWER_SHOWN
            ));
        }
    }
    let finished = finished_record!(SubagentFinished, summary, {
        call_id: started.call_id.clone(),
        session_id: started.session_id.clone(),
        log_dir: started.log_dir.clone(),
        merge: None,
    });
    ChildReport {
        finished: Box::new(finished),
        status,
        text,
        state: Box::new(merging),
    }
}

fn first_line(text: &str) -> &str {
    harness_log::text::head(text.lines().next().unwrap_or(""), 120)
}

impl Spawn for Spawner<'_> {
    fn prepare<'a>(
        &'a self,
        call: &'a ToolCall,
        number: u64,
        args: AgentArgs,
    ) -> BoxFuture<'a, Result<Child, String>> {
        Box::pin(async move {
            self.tree.admit(self.depth)?;
            let mut pending = self.make(call, number, &args)?;
            if pending.started.workspace == WorkspaceMode::Fork {
                // Copied now, before any child of the group runs: every fork of a group
                // starts from the same workspace.
                let forked = Forked::start(&pending.options, self.client)
                    .await
                    .map_err(|err| format!("its workspace could not be copied: {err}"))?;
                pending.options.subagent = pending.options.subagent.take().map(|mut child| {
                    child.client = forked.client().clone();
                    child.token = forked.token().to_owned();
                    child
                });
                pending.forked = Some(forked);
            }
            Ok(Child {
                started: pending.started.clone(),
                state: Box::new(Some(pending)),
            })
        })
    }

    fn run(&self, child: Child) -> BoxFuture<'_, ChildReport> {
        Box::pin(async move {
            let pending = child
                .state
                .downcast::<Option<Pending>>()
                .ok()
                .and_then(|pending| *pending)
                .expect("a child is run by the spawner that prepared it");
            self.run_child(pending).await
        })
    }

    fn merge<'a>(&'a self, report: &'a mut ChildReport) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(merging) = report.state.downcast_mut::<Merging>() else {
                return;
            };
            let Some(changes) = merging.forked.take() else {
                return;
            };
            let merged = if self.stopping() {
                let why = "the session was stopped before they could be applied";
                changes.withheld(self.log, Some(why))
            } else {
                changes.merge(self.client, self.log).await
            };
            report.text.push_str(&merged.describe());
            report.finished.merge = Some(merged.record);
        })
    }

    fn spent(&self) -> f64 {
        self.tree.spent()
    }

    fn add_cost(&self, cost: f64) {
        self.tree.add_cost(cost);
    }

    fn authority(&self) -> &str {
        &self.tree.root_task
    }

    fn busy(&self) -> Box<dyn Send + Sync + '_> {
        self.groups.fetch_add(1, Ordering::SeqCst);
        Box::new(Busy(self.groups))
    }

    fn stopping(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A child's display: its notes under its label, its calls as notes, no live output.
struct Labelled<'a> {
    inner: &'a dyn Observer,
    label: &'a str,
}

impl Observer for Labelled<'_> {
    fn tool_call(&self, call: &ToolCall) {
        self.inner.note(&format!(
            "[{}] {} {}",
            self.label, call.name, call.arguments
        ));
    }

    fn tool_refused(&self, call: &ToolCall, reason: &str) {
        self.inner
            .note(&format!("[{}] {} refused: {reason}", self.label, call.name));
    }

    fn compacted(&self, before: usize, after: usize) {
        self.inner.note(&format!(
            "[{}] compacted {before} messages to {after}",
            self.label
        ));
    }

    fn note(&self, text: &str) {
        self.inner.note(&format!("[{}] {text}", self.label));
    }
}

/// Asks of a person one at a time, whichever child asks.
struct Serial<'a> {
    inner: &'a dyn Asker,
    lock: &'a tokio::sync::Mutex<()>,
}

impl Asker for Serial<'_> {
    fn ask<'a>(
        &'a self,
        call: &'a sandbox_protocol::ToolInput,
        reason: &'a str,
    ) -> BoxFuture<'a, Option<bool>> {
        Box::pin(async move {
            let _one = self.lock.lock().await;
            self.inner.ask(call, reason).await
        })
    }
}
