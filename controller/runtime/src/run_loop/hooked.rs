//! The session's side of hooks: run the hooks of an event with the session's facts, log every
//! run (`hook_run`), and combine their answers.

use serde_json::{Value, json};

use super::{Agent, SessionError};
use crate::hooks::{Combined, HookEvent, HookRun, RunOutcome};
use event_log::{Event, HookOutcome, HookRunEvent};
use llm::ToolCall;

impl Agent<'_> {
    /// Runs the hooks of `event` (those matching `call`'s tool, for tool events) with `input`
    /// plus the session's id, logs each run, and returns what they decided together.
    pub(super) async fn hook(
        &self,
        event: HookEvent,
        call: Option<&ToolCall>,
        mut input: Value,
    ) -> Result<Combined, SessionError> {
        if self
            .hooks
            .matching(event, call.map(|c| c.name.as_str()))
            .is_empty()
        {
            return Ok(Combined::default());
        }
        if let Value::Object(fields) = &mut input {
            fields.insert("session_id".to_owned(), json!(self.recorder.session_id()));
            if let Some(call) = call {
                fields.insert("call_id".to_owned(), json!(call.id));
                fields.insert("tool".to_owned(), json!(call.name));
            }
        }
        let runs = self
            .hooks
            .run(event, call.map(|c| c.name.as_str()), input.clone())
            .await;
        let log = &self.recorder.log;
        let blob = log.json_blob(&input)?;
        for run in &runs {
            let record = logged(run, call, blob.clone(), log.text(&run.output)?);
            log.record(Event::HookRun(record)).await?;
        }
        Ok(Combined::of(&runs))
    }
}

fn logged(
    run: &HookRun,
    call: Option<&ToolCall>,
    input: event_log::BlobRef,
    output: event_log::Text,
) -> HookRunEvent {
    let answer = run.effective();
    HookRunEvent {
        hook: run.name.clone(),
        event: run.event,
        handler: run.handler.clone(),
        call_id: call.map(|c| c.id.clone()),
        tool: call.map(|c| c.name.clone()),
        outcome: match run.outcome {
            RunOutcome::Answered(_) => HookOutcome::Answered,
            RunOutcome::Blocked(_) => HookOutcome::Blocked,
            RunOutcome::Failed(_) => HookOutcome::Failed,
            RunOutcome::TimedOut => HookOutcome::TimedOut,
        },
        decision: answer.decision,
        reason: answer.reason,
        updated_input: answer.updated_input,
        additional_context: answer.additional_context,
        stop: answer.stop == Some(true),
        duration_ms: run.duration.as_millis() as u64,
        input,
        output,
    }
}

/// The model's text with the hooks' context after it.
pub fn with_context(text: String, context: &[String]) -> String {
    if context.is_empty() {
        return text;
    }
    let notes: Vec<String> = context
        .iter()
        .map(|c| format!("[hook] {}", c.trim()))
        .collect();
    format!("{text}\n\n{}", notes.join("\n"))
}
