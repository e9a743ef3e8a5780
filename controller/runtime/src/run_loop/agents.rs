//! A group of `agent` calls (consecutive in one reply): each is logged, hooked and judged in
//! call order like any call; the children of those allowed start in call order and run at
//! once; forked children's changes are merged in call order; then each call gets its result,
//! in call order, and the group's net change of the workspace is recorded once.

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::future::BoxFuture;

use super::tool_call::Begun;
use super::{Agent, CallOutcome, SessionError, Totals, current, next_call};
use crate::subagent::{AgentArgs, is_agent_tool};
use harness_log::{SubagentFinished, SubagentStarted, ToolStatus};
use harness_models::{Message, ToolCall};

/// A call of a group, decided: its record, what it came to (or the child it starts), and the
/// hooks' context for the model.
type Decided<'c, 's> = (Begun<'c, 's>, CallOutcome, Vec<String>);

/// Who starts the child sessions of a session's `agent` calls
/// ([`crate::subagent::spawn::Spawner`]).
pub trait Spawn: Send + Sync {
    /// Checks the tree's limits and makes the child ready (a forked child's workspace is
    /// copied here, before any child of the group runs). `Err`: why not, for the model.
    fn prepare<'a>(
        &'a self,
        call: &'a ToolCall,
        number: u64,
        args: AgentArgs,
    ) -> BoxFuture<'a, Result<Child, String>>;
    /// Runs a prepared child to its end.
    fn run(&self, child: Child) -> BoxFuture<'_, ChildReport>;
    /// A forked child's changes, applied to this session's workspace when nothing clashes.
    fn merge<'a>(&'a self, report: &'a mut ChildReport) -> BoxFuture<'a, ()>;
    /// USD spent by the whole tree of sessions (the root's `--max-cost` is its budget).
    fn spent(&self) -> f64;
    fn add_cost(&self, cost: f64);
    /// The task every call of the tree is judged against: the root user's.
    fn authority(&self) -> &str;
    /// A group is running (for a drain on Ctrl-C); the guard ends it.
    fn busy(&self) -> Box<dyn Send + Sync + '_>;
    /// The session is stopping: a group that has recorded its results goes no further.
    fn stopping(&self) -> bool;
}

/// A child about to run: what `subagent_started` says, and the spawner's own state.
pub struct Child {
    pub started: SubagentStarted,
    pub state: Box<dyn std::any::Any + Send + Sync>,
}

/// How a child ended: `subagent_finished`, and the call's result.
pub struct ChildReport {
    pub finished: Box<SubagentFinished>,
    pub status: ToolStatus,
    pub text: String,
    /// The spawner's own state, for [`Spawn::merge`].
    pub state: Box<dyn std::any::Any + Send + Sync>,
}

impl Agent<'_> {
    /// The `agent` calls at the head of `calls`, when the session has the tool.
    pub(super) fn agent_group<'c>(&self, calls: &'c [ToolCall]) -> &'c [ToolCall] {
        if self.subagents.is_none() {
            return &[];
        }
        let n = calls
            .iter()
            .take_while(|call| is_agent_tool(&call.name))
            .count();
        &calls[..n]
    }

    /// Runs a group of `agent` calls; their results are pushed on `messages` in call order.
    pub(super) async fn run_group(
        &self,
        group: &[ToolCall],
        task: &str,
        totals: &Mutex<Totals>,
        messages: &mut Vec<Message>,
    ) -> Result<(), SessionError> {
        let Some(spawn) = self.subagents else {
            return Ok(());
        };
        let busy = spawn.busy();
        let base = self.recorder.group_base().await?;
        let (begun, children) = self.decide_group(group, task, totals, spawn).await?;
        let runs = children
            .into_iter()
            .map(|(at, child)| async move { (at, spawn.run(child).await) });
        let mut reports: BTreeMap<usize, ChildReport> =
            futures::future::join_all(runs).await.into_iter().collect();
        for report in reports.values_mut() {
            spawn.merge(report).await;
        }
        let mut last = None;
        for (at, (this, outcome, context)) in begun.into_iter().enumerate() {
            let call = this.call;
            let outcome = match reports.remove(&at) {
                Some(report) => {
                    self.roll_up(totals, &report.finished);
                    this.record.child_finished(report.finished).await?;
                    CallOutcome::text_only(report.status, report.text)
                }
                None => outcome,
            };
            let finished = self.finish(this, outcome, context).await;
            self.observer.tool_finished(call);
            let (result, _) = finished?;
            messages.push(Message::Tool {
                tool_call_id: call.id.clone(),
                content: result,
            });
            last = Some(call.id.clone());
        }
        if let Some(call_id) = last {
            self.recorder.after_group(&call_id, &base).await?;
        }
        drop(busy);
        if spawn.stopping() {
            // Ctrl-C or the lifetime: every call has its result; the session ends here.
            std::future::pending::<()>().await;
        }
        Ok(())
    }

    /// Each call of the group logged, hooked and judged in call order, and the children of
    /// those allowed made ready (by their position in the group), before any of them runs:
    /// a forked child's copy is the workspace as the parent left it. When one fails, every
    /// call begun so far gets its result before the error is returned.
    async fn decide_group<'c, 's>(
        &'s self,
        group: &'c [ToolCall],
        task: &str,
        totals: &Mutex<Totals>,
        spawn: &dyn Spawn,
    ) -> Result<(Vec<Decided<'c, 's>>, Vec<(usize, Child)>), SessionError> {
        let mut begun = Vec::new();
        let mut children = Vec::new();
        let decided = async {
            for call in group {
                self.observer.tool_call(call);
                let number = next_call(totals);
                let name = self.recorder.call_name(number);
                let this = self.begin(call, &name).await?;
                let (this, mut outcome, context) = self.decide_and_run(this, task).await?;
                if let Some(args) = outcome.agent.take() {
                    match spawn.prepare(call, number, args).await {
                        Ok(child) => {
                            this.record.child_started(child.started.clone()).await?;
                            children.push((begun.len(), child));
                        }
                        Err(why) => {
                            let text = format!("ERROR: agent: refused: {why}");
                            outcome = CallOutcome::text_only(ToolStatus::Error, text);
                        }
                    }
                }
                begun.push((this, outcome, context));
            }
            Ok::<_, SessionError>(())
        }
        .await;
        if let Err(err) = decided {
            for (this, _, _) in begun {
                this.record.abandon(&err).await;
            }
            return Err(err);
        }
        Ok((begun, children))
    }

    /// A child's spending, counted in this session's totals beside its own.
    fn roll_up(&self, totals: &Mutex<Totals>, child: &SubagentFinished) {
        current(totals).subagents.add(child);
    }
}
