//! Fork replay: a session's state after one of its steps — the conversation as the model had
//! it and the workspace as `restore` rebuilds it — for child sessions that continue from there
//! (`harness replay fork`).
//!
//! The conversation is rebuilt from the log the way the loop built it (the opening with its
//! hooks' words, replies, tool results, compactions, a `stop` hook's "go on"), and checked
//! against every model request the log holds: a rebuild whose message count (and, where the
//! model keeps no provider items, token estimate) differs from what the model was sent is
//! refused, never forked from.

use std::collections::BTreeSet;
use std::path::Path;

use super::restore::{self, State};
use super::{ReplayError, events, text};
use harness_log::{
    Event, HookDecision, HookEvent, HookRunEvent, ModelResponse, Purpose, SessionStarted,
};
mod files;
mod summary;

pub use files::{clone_workspace, link_blobs};
pub use summary::{ForkChild, ForkParent, ForkSummary, forks_of, line, table};

use harness_models::{AssistantMessage, Message, estimate_tokens};
use harness_runtime::run_loop::{compacted, compaction_split, with_context};

/// A recorded session's state after event `seq`.
#[derive(Debug, Clone)]
pub struct ForkPoint {
    pub header: SessionStarted,
    pub seq: u64,
    /// The conversation as the model would have it at its next call.
    pub messages: Vec<Message>,
    /// The turns taken by then.
    pub turns: u32,
    /// The turn replies (and the classifier answers) given by then: what a scripted
    /// continuation skips.
    pub turn_replies: usize,
    pub verdicts: usize,
    /// USD spent by then (the replies whose cost is known), its subagents' included.
    pub cost: f64,
    pub model_calls: u64,
    /// The workspace, path to version.
    pub state: State,
    /// Whether hooks ran before the fork (the children need `--hooks` to have them too).
    pub hooks_ran: bool,
}

/// Where a fork may start: after a turn's calls all have their results and their changes are
/// recorded, before the next model call; never after the final answer.
#[derive(Debug, Default)]
struct Boundaries {
    valid: BTreeSet<u64>,
}

impl Boundaries {
    /// The nearest steps to `seq` a fork may start at, before and after it.
    fn around(&self, seq: u64) -> (Option<u64>, Option<u64>) {
        (
            self.valid.range(..seq).next_back().copied(),
            self.valid.range(seq..).next().copied(),
        )
    }
}

/// The conversation as the loop builds it, one event at a time.
#[derive(Debug, Clone, Default)]
struct Rebuild {
    system: String,
    task: String,
    opening_context: (Vec<String>, Vec<String>),
    messages: Option<Vec<Message>>,
    /// Calls of the last reply without their result yet.
    pending: Vec<String>,
    /// The `stop` hooks' runs after a final reply, not yet settled.
    stop_runs: Vec<HookRunEvent>,
    /// The last reply called no tool and no hook asked for more: the session was over.
    finished: bool,
    turns: u32,
    turn_replies: usize,
    verdicts: usize,
    cost: f64,
    model_calls: u64,
    max_turns: u32,
    hooks_ran: bool,
}

impl Rebuild {
    fn messages(&mut self) -> &mut Vec<Message> {
        let (system, task) = (&self.system, &self.task);
        let context = &self.opening_context;
        self.messages.get_or_insert_with(|| {
            vec![
                Message::System {
                    content: with_context(system.clone(), &context.0),
                },
                Message::User {
                    content: with_context(task.clone(), &context.1),
                },
            ]
        })
    }

    /// A forked session began with its parent's conversation at the step it names: read from
    /// the parent's log, which must be the session the header names.
    fn inherit(&mut self, from: &harness_log::ForkedFrom, depth: u32) -> Result<(), ReplayError> {
        const DEEPEST: u32 = 16;
        if depth >= DEEPEST {
            return Err(ReplayError::Io(format!(
                "forks {DEEPEST} deep (or a log whose parents form a circle): not followed"
            )));
        }
        let dir = Path::new(&from.log_dir);
        let parent = ForkPoint::read_within(dir, from.seq, depth + 1).map_err(|err| {
            ReplayError::Io(format!(
                "this session was forked from {} at step {}, whose conversation it began with: {err}",
                dir.display(),
                from.seq
            ))
        })?;
        if parent.header.session_id != from.session_id {
            return Err(ReplayError::Io(format!(
                "this session was forked from session {}, but {} holds session {}",
                from.session_id,
                dir.display(),
                parent.header.session_id
            )));
        }
        self.messages = Some(parent.messages);
        self.turns = from.turns;
        // The loop's turns go on after the parent's; a scripted model's position too.
        self.max_turns += from.turns;
        self.turn_replies = parent.turn_replies;
        self.verdicts = parent.verdicts;
        Ok(())
    }

    /// A final reply's `stop` hooks denied: their reason is the next message, as the loop
    /// sends it (when the loop had a turn left to go on with).
    fn settle_stop(&mut self) {
        if self.stop_runs.is_empty() {
            return;
        }
        let runs = std::mem::take(&mut self.stop_runs);
        let decision = runs.iter().filter_map(|run| run.decision).max();
        if decision != Some(HookDecision::Deny) || self.turns >= self.max_turns {
            return;
        }
        let reason = runs
            .iter()
            .filter(|run| run.decision == decision)
            .map(|run| {
                format!(
                    "hook {}: {}",
                    run.hook,
                    run.reason.clone().unwrap_or_default()
                )
                .trim_end_matches(": ")
                .to_owned()
            })
            .collect::<Vec<_>>()
            .join("; ");
        let context: Vec<String> = runs
            .iter()
            .filter_map(|run| run.additional_context.clone())
            .filter(|text| !text.trim().is_empty())
            .collect();
        self.finished = false;
        self.messages().push(Message::User {
            content: with_context(reason, &context),
        });
    }

    /// Whether the loop asks the model again: the last reply called tools, or its `stop`
    /// hooks sent the model back.
    fn goes_on(&self) -> bool {
        !self.finished
            || (self.turns < self.max_turns
                && self
                    .stop_runs
                    .iter()
                    .any(|run| run.decision == Some(HookDecision::Deny)))
    }

    fn reply(&mut self, dir: &Path, response: &ModelResponse) -> Result<(), ReplayError> {
        self.model_calls += 1;
        self.cost += response.cost.unwrap_or(0.0);
        if response.purpose == Purpose::Summary {
            return Ok(());
        }
        self.turns = response.turn;
        self.turn_replies += 1;
        let tool_calls = super::tool_calls(response);
        self.pending = tool_calls.iter().map(|call| call.id.clone()).collect();
        self.finished = tool_calls.is_empty();
        let content = text(dir, &response.text)?;
        self.messages().push(Message::Assistant(AssistantMessage {
            content,
            tool_calls,
            provider_items: None,
        }));
        Ok(())
    }

    fn hook(&mut self, run: HookRunEvent) {
        self.hooks_ran = true;
        let context = run
            .additional_context
            .clone()
            .filter(|text| !text.trim().is_empty());
        match run.event {
            HookEvent::SessionStart if self.messages.is_none() => {
                self.opening_context.0.extend(context)
            }
            HookEvent::UserPrompt if self.messages.is_none() => {
                self.opening_context.1.extend(context)
            }
            HookEvent::Stop => self.stop_runs.push(run),
            _ => {}
        }
    }

    /// A recorded compaction, made again on the rebuilt conversation.
    fn compaction(
        &mut self,
        dir: &Path,
        seq: u64,
        compaction: &harness_log::Compaction,
    ) -> Result<(), ReplayError> {
        let summary = text(dir, &compaction.summary)?;
        let messages = self.messages();
        let split = compaction_split(messages).filter(|split| {
            (split - 2) as u64 == compaction.n_replaced
                && messages.len() as u64 == compaction.n_before
        });
        let Some(split) = split else {
            return Err(ReplayError::Io(format!(
                "the compaction at seq {seq} replaced {} of {} messages, which the rebuilt conversation ({} messages) does not match",
                compaction.n_replaced,
                compaction.n_before,
                messages.len()
            )));
        };
        *messages = compacted(messages, split, &summary);
        Ok(())
    }

    /// Checks the rebuild against a request the model was sent.
    fn check(
        &mut self,
        seq: u64,
        request: &harness_log::ModelRequest,
        tokens: bool,
    ) -> Result<(), ReplayError> {
        let messages = self.messages();
        let (n, estimated) = (messages.len() as u64, estimate_tokens(messages) as u64);
        if n != request.n_messages || (tokens && estimated != request.estimated_tokens) {
            return Err(ReplayError::Io(format!(
                "the conversation cannot be rebuilt exactly from this log: at seq {seq} the model was sent {} messages (~{} tokens), the rebuild has {n} (~{estimated}); refusing to fork from a conversation that is not the one the model had",
                request.n_messages, request.estimated_tokens
            )));
        }
        Ok(())
    }
}

impl ForkPoint {
    /// Reads the session in `dir` up to the state after event `seq`. The whole log is read:
    /// the state at a step is checked by the model request after it.
    pub fn read(dir: &Path, seq: u64) -> Result<ForkPoint, ReplayError> {
        Self::read_within(dir, seq, 0)
    }

    /// `read`, `depth` forks down from the first session (a fork of a fork begins with its
    /// parent's conversation, read from the parent's log).
    fn read_within(dir: &Path, seq: u64, depth: u32) -> Result<ForkPoint, ReplayError> {
        let mut reading = Reading::new(dir, seq, depth);
        for envelope in events(dir, |_| {})? {
            reading.step(envelope?)?;
        }
        reading.finish()
    }
}

/// One pass over a log towards the state after step `seq`: the rebuild so far, the steps a
/// fork may start at, and the rebuild as it stood at `seq`.
struct Reading<'a> {
    dir: &'a Path,
    seq: u64,
    depth: u32,
    header: Option<SessionStarted>,
    rebuild: Rebuild,
    boundaries: Boundaries,
    at_seq: Option<Rebuild>,
    /// Steps after a turn's last result, until it is known whether its changes follow.
    tentative: Vec<u64>,
    /// Whether the token estimate of the model's requests is checked too.
    tokens: bool,
    /// The last event's seq, for the error when `seq` is past the end.
    last: u64,
}

impl<'a> Reading<'a> {
    fn new(dir: &'a Path, seq: u64, depth: u32) -> Self {
        Reading {
            dir,
            seq,
            depth,
            header: None,
            rebuild: Rebuild::default(),
            boundaries: Boundaries::default(),
            at_seq: None,
            tentative: Vec::new(),
            tokens: true,
            last: 0,
        }
    }

    /// One event: what it tells of the steps before it, then what it adds to the rebuild.
    fn step(&mut self, envelope: harness_log::Envelope) -> Result<(), ReplayError> {
        self.settle_steps(&envelope.event);
        self.apply(envelope.seq, envelope.event)?;
        self.last = envelope.seq;
        if self.header.is_some() && self.rebuild.pending.is_empty() && self.rebuild.goes_on() {
            self.tentative.push(envelope.seq);
        }
        if envelope.seq == self.seq {
            self.rebuild.settle_stop();
            self.rebuild.messages();
            self.at_seq = Some(self.rebuild.clone());
        }
        Ok(())
    }

    /// Decides the tentative steps before `event`, and settles a final reply's `stop` hooks
    /// once the event after them is not another one. Its own step: it looks at the event
    /// before the rebuild takes it.
    fn settle_steps(&mut self, event: &Event) {
        // A step is one a fork may start at once the next event shows it complete: not
        // followed by its call's changes, nor by another `stop` hook of the same reply.
        match event {
            Event::WorkspaceChanged(_)
            | Event::StateFingerprint(harness_log::StateFingerprint {
                call_id: Some(_), ..
            }) => self.tentative.clear(),
            Event::HookRun(run) if run.event == HookEvent::Stop => self.tentative.clear(),
            Event::Error(harness_log::ErrorEvent {
                call_id: Some(_), ..
            }) => {}
            _ => self.boundaries.valid.extend(self.tentative.drain(..)),
        }
        if !matches!(event, Event::HookRun(run) if run.event == HookEvent::Stop) {
            self.rebuild.settle_stop();
        }
    }

    /// What `event` adds to the conversation, the counts and the cost.
    fn apply(&mut self, seq: u64, event: Event) -> Result<(), ReplayError> {
        let (dir, rebuild) = (self.dir, &mut self.rebuild);
        match event {
            Event::SessionStarted(started) => {
                rebuild.system = match &started.system_prompt {
                    Some(prompt) => text(dir, prompt)?,
                    None => String::new(),
                };
                rebuild.task = started.task.clone();
                rebuild.max_turns = started.config.max_turns;
                if let Some(from) = &started.forked_from {
                    rebuild.inherit(from, self.depth)?;
                }
                // Provider items (reasoning, signatures) are in the raw replies only: the
                // token estimate of such a model's requests is not rebuilt.
                self.tokens = !["openai/", "anthropic/"]
                    .iter()
                    .any(|provider| started.config.model.starts_with(provider));
                self.header = Some(*started);
            }
            Event::ModelRequest(request) if request.purpose == Purpose::Turn => {
                rebuild.check(seq, &request, self.tokens)?;
            }
            Event::ModelResponse(response) => rebuild.reply(dir, &response)?,
            Event::ToolResult(result) => {
                rebuild.pending.retain(|id| id != &result.call_id);
                let content = text(dir, &result.output)?;
                rebuild.messages().push(Message::Tool {
                    tool_call_id: result.call_id,
                    content,
                });
            }
            Event::Compaction(compaction) => rebuild.compaction(dir, seq, &compaction)?,
            Event::PolicyDecision(decision)
                if decision.risk.is_some() && decision.authorized.is_some() =>
            {
                rebuild.verdicts += 1;
            }
            Event::HookRun(run) => rebuild.hook(run),
            // The tree's budget is the root's: what its subagents spent counts too.
            Event::SubagentFinished(child) => {
                rebuild.cost += child.cost + child.subagents.map_or(0.0, |s| s.cost);
            }
            Event::SessionFinished(_) => rebuild.finished = true,
            _ => {}
        }
        Ok(())
    }

    /// The state at `seq` once the whole log is read: refused when the log has no header,
    /// ends before `seq`, or `seq` is no step a fork may start at.
    fn finish(mut self) -> Result<ForkPoint, ReplayError> {
        let (dir, seq) = (self.dir, self.seq);
        self.boundaries.valid.extend(self.tentative);
        let header = self.header.ok_or_else(|| {
            ReplayError::Io(format!("{}: the log has no session_started", dir.display()))
        })?;
        let Some(at) = self.at_seq else {
            return Err(ReplayError::Io(format!(
                "{}: the log ends at seq {}; step {seq} is past its end (`replay show` lists the steps)",
                dir.display(),
                self.last
            )));
        };
        if !self.boundaries.valid.contains(&seq) {
            return Err(ReplayError::Io(not_a_boundary(seq, &at, &self.boundaries)));
        }
        let (state, _) = restore::state_at(dir, seq)?;
        restore::check_state(&state)?;
        Ok(ForkPoint {
            header,
            seq,
            messages: at.messages.unwrap_or_default(),
            turns: at.turns,
            turn_replies: at.turn_replies,
            verdicts: at.verdicts,
            cost: at.cost,
            model_calls: at.model_calls,
            state,
            hooks_ran: at.hooks_ran,
        })
    }
}

fn not_a_boundary(seq: u64, at: &Rebuild, boundaries: &Boundaries) -> String {
    let why = if at.finished {
        "the session had ended by then (the model had given its final answer)".to_owned()
    } else if !at.pending.is_empty() {
        format!(
            "it is inside turn {}: call {} has no result yet",
            at.turns,
            at.pending.join(", ")
        )
    } else {
        "the files the last call changed are recorded after it".to_owned()
    };
    let (before, after) = boundaries.around(seq);
    let near: Vec<String> = [before, after]
        .into_iter()
        .flatten()
        .map(|step| step.to_string())
        .collect();
    let hint = match near.as_slice() {
        [] => "this log has no step a fork can start at".to_owned(),
        steps => format!(
            "the nearest steps a fork can start at: {} (between turns, once a turn's calls and their changes are recorded)",
            steps.join(" and ")
        ),
    };
    format!("cannot fork at step {seq}: {why}; {hint}")
}
