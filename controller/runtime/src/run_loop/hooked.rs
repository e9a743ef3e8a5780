//! The session's side of hooks: run the hooks of an event with the session's facts, log every
//! run (`hook_run`), and combine their answers.

use super::{Agent, SessionError};
use crate::hooks::{About, Combined, HookInput, HookRun, RunOutcome};
use harness_log::{Event, HookOutcome, HookRunEvent};

impl Agent<'_> {
    /// Runs the hooks of the event `about` names (those matching its call's tool, for tool
    /// events) with the session's id, logs each run, and returns what they decided together.
    pub(super) async fn hook(&self, about: About) -> Result<Combined, SessionError> {
        let tool = about.call().map(|(_, tool)| tool);
        if self.hooks.matching(about.event(), tool).is_empty() {
            return Ok(Combined::default());
        }
        let input = HookInput {
            session_id: self.recorder.session_id().to_owned(),
            about,
        };
        let runs = self.hooks.run(&input).await;
        let log = &self.recorder.log;
        // A struct of strings, numbers and JSON values: it always serializes.
        let blob = log.json_blob(&serde_json::to_value(&input).unwrap_or_default())?;
        for run in &runs {
            let record = logged(
                run,
                input.about.call(),
                blob.clone(),
                log.text(&run.output)?,
            );
            log.record(Event::HookRun(record)).await?;
        }
        Ok(Combined::of(&runs))
    }
}

fn logged(
    run: &HookRun,
    call: Option<(&str, &str)>,
    input: harness_log::BlobRef,
    output: harness_log::Text,
) -> HookRunEvent {
    let answer = run.effective();
    HookRunEvent {
        hook: run.name.clone(),
        event: run.event,
        handler: run.handler.clone(),
        call_id: call.map(|(id, _)| id.to_owned()),
        tool: call.map(|(_, tool)| tool.to_owned()),
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
