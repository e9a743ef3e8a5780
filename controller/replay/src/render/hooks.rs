//! A `hook_run` in a transcript: which hook, on what, what it decided and why.

use std::path::Path;

use super::{Block, folded, plain};
use crate::ReplayError;
use harness_log::{HookOutcome, HookRunEvent};

pub(super) fn hook_run(
    block: &mut Block,
    dir: &Path,
    run: &HookRunEvent,
) -> Result<(), ReplayError> {
    let about = run
        .tool
        .as_deref()
        .map(|t| format!(" on {t}"))
        .unwrap_or_default();
    let outcome = match run.outcome {
        HookOutcome::Answered => "answered",
        HookOutcome::Blocked => "blocked (exit 2)",
        HookOutcome::Failed => "failed",
        HookOutcome::TimedOut => "timed out",
    };
    let decided = run
        .decision
        .map(|d| format!(": {}", d.as_str()))
        .unwrap_or_default();
    block.title = format!(
        "Hook {} ({}{about}) {outcome}{decided} in {} ms",
        run.hook,
        run.event.as_str(),
        run.duration_ms
    );
    block.notes.push(run.handler.clone());
    if let Some(reason) = &run.reason {
        block.sections.push(plain("reason", reason));
    }
    if let Some(input) = &run.updated_input {
        block
            .sections
            .push(plain("updated input", &input.to_string()));
    }
    if let Some(context) = &run.additional_context {
        block.sections.push(plain("context for the model", context));
    }
    if run.stop {
        block.notes.push("asked to stop the session".to_owned());
    }
    let printed = folded(dir, "output", &run.output)?;
    if !printed.body.trim().is_empty() {
        block.sections.push(printed);
    }
    Ok(())
}
